"""What the tests, the fault run and the benchmarks share; nothing here is a test.

- ``waiting``: wait on a condition with a deadline (tests never sleep and hope), ``gone(pid)``.
- ``expect``: assertions on ``ToolResult``.
- ``ports``: a free loopback port (the embedded Redis's own picker, never 6379).
- ``procs``: real worker processes for the distributed proofs, and the events they emit;
  run as ``python -m tests.support.procs NAME REGISTRY`` it is one such worker.
- ``dist_tools``: the tools those workers serve (``tests.support.dist_tools:registry``).
- ``lock_proc``: the child process of the lock's multi-process proofs.
- ``sample_tools``: a user's own tools, loaded by import string.
- ``sessions``: worker groups serving sessions, and session helpers for the sessions proofs.
- ``fault``: the fault run (``python -m tests.support.fault.run``, ``tests/test_fault_run.py``).

The benchmarks live in the top-level ``benchmarks`` package and import ``ports``, ``procs``,
``pids`` and ``waiting`` from here.

Child processes find this package through ``procs.python_path_env``: the repository root on
``PYTHONPATH``.
"""
