"""The benchmarks behind ``scripts/bench_calls.py``, ``bench_lock.py`` and ``bench_grep.py``.

``calls`` (toolpool against raw RQ) with its parts ``sides`` (the two sides), ``overhead``
(where a call's time goes) and ``workers`` (what its spawned processes run); ``lock`` (the
reader/writer lock); ``grep`` (the grep tool against GNU grep).
"""
