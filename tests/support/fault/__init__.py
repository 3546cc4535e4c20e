"""The fault run: worker pools and orchestrators under load while faults are injected.

``run`` holds the configuration, the run and its command line (``python -m
tests.support.fault.run``); ``procs`` the Redis server, the worker pools and the scan for
leftovers; ``load`` the orchestrators and their calls; ``inject`` the faults; ``observe`` the
file observer; ``checks`` the checks and the table; ``proxy`` the TCP proxy a fault cuts.
"""
