"""The benchmarks behind ``scripts/bench_*.py``.

``calls`` (toolpool against raw RQ) with its parts ``sides`` (the two sides), ``overhead``
(where a call's time goes) and ``workers`` (what its spawned processes run); ``lock`` (the
reader/writer lock); ``grep`` (the grep tool against ripgrep and GNU grep); ``sessions`` and
``scale``; ``sandbox`` (bash's sandbox against unconfined bash); ``mcp`` (one MCP
``tools/call`` over stdio and HTTP against ``Executor.run``). ``entry`` runs any of them.
"""
