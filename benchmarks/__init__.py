"""toolpool's benchmarks, each run as ``python -m benchmarks.NAME [options]`` from a checkout.

``calls`` (toolpool against raw RQ) with its parts ``sides`` (the two sides), ``overhead``
(where a call's time goes) and ``workers`` (what its spawned processes run); ``lock`` (the
reader/writer lock); ``grep`` (the grep tool against ripgrep and GNU grep); ``sessions`` and
``scale``; ``sandbox`` (bash's sandbox against unconfined bash, in-process), ``sandbox_pool``
(what the sandbox adds to a call through ``toolpool worker``) and ``sandbox_parts`` (where a
sandboxed launch's time goes); ``mcp`` (one MCP
``tools/call`` over stdio and HTTP against ``Executor.run``); ``dashboard`` (the pool with and
without ``toolpool dashboard``'s live viewers); ``processes`` (what a session's background
process costs: a start, a read of its output, one idle); ``many_sessions`` (1,000 sessions on
one host: create time, Redis memory per idle session, 200 agents at work, with its parts
``session_host``, ``session_memory`` and ``agent_turns``); ``pickup`` (how soon a worker of
two queues takes a call, against a worker of one, and what idle pools send). ``entry`` runs
any of them.

Not part of the wheel: the editable install (``scripts/test``, ``scripts/demo``) puts the
repository root on ``sys.path``, so this package and the ``tests.support`` helpers it shares
with the tests import in every process a benchmark spawns.
"""
