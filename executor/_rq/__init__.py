"""The one room that imports RQ: every use of RQ by toolpool goes through these modules.

- ``names``: RQ's key names (a job's hash, a queue's list, its deferred registry) and its
  timestamps, for the Lua that releases a turn's next batch.
- ``jobs``: the one entry point, the queues, enqueueing a turn and a session's folder work,
  reading and ending jobs, the registries the pool sweeps.
- ``dequeue``: taking a job off several queues at once without losing it.
- ``doorbell``: what enqueuers ring so that a worker of several queues wakes for any of them.
- ``worker``: the worker classes that run only toolpool's entry point.
- ``state``: what the dashboard and the metrics read of RQ's workers and registries.

The RQ behaviour these rely on is pinned by ``tests/test_rq_contract.py``; ``pyproject.toml``
pins rq to the minor version that test passed on. Nothing outside this folder imports ``rq``.
This face imports nothing, so a module that needs one part loads only that part.
"""
