"""Exceptions of the distributed lock; all derive from ``executor._errors.ToolpoolError``::

    ToolpoolError
    └── LockError               the lock could not do what was asked
        ├── LockTimeout         no grant before the timeout; the waiter has left the queue
        ├── LockUnavailable     Redis could not be reached long enough to take or free the lock
        └── LockProtocolError   a script answered with a code this version does not know

A lease lost while held is not an exception: it is reported on the ``Lease`` (``lost``,
``lost_event``, ``on_lost`` callbacks), and a fenced commit then raises
``executor._errors.FenceError``.
"""

from __future__ import annotations

from executor._errors import ToolpoolError


class LockError(ToolpoolError):
    """The lock could not do what was asked."""


class LockTimeout(LockError):
    """No grant came before the timeout; the waiter left the queue and woke whoever it blocked."""


class LockUnavailable(LockError):
    """Redis could not be reached long enough to take, prove or free the lock."""


class LockProtocolError(LockError):
    """A lock script returned a code this version of toolpool does not know."""
