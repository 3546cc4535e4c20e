"""Background processes of sessions on this host: started by a call, kept beyond it.

A process belongs to its session, not to the call or the worker that started it: a keeper
daemon (``_keeper``) runs it on a terminal of its own in the session's sandbox and network
(``_netns``), and every worker of the host reads and drives it through the files in the
session's host folder (``_place``). ``_table`` is what the tools use; ``_ending`` stops a
session's processes when the session ends, and a pool's when the pool stops.
"""
