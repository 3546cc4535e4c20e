"""toolpool's distributed reader/writer lock on Redis (fair, leased, fenced).

Typical use::

    lock = RWLock.from_url(url, scope="global")
    with lock.acquire("exclusive", timeout=30, owner=OwnerInfo.current(tool="write_file")) as lease:
        ...                      # write a temp file
        lease.assert_fenced()    # raises FenceError if the lock was lost meanwhile
        ...                      # rename it into place
"""

from executor._errors import LockError, LockProtocolError, LockTimeout, LockUnavailable
from executor.lock._lease import Lease
from executor.lock._models import (
    EXCLUSIVE,
    FAIR,
    READ_PREFERRING,
    SHARED,
    HolderStatus,
    LockStatus,
    Mode,
    OwnerInfo,
    Policy,
    WaiterStatus,
)
from executor.lock._rwlock import RWLock

__all__ = [
    "EXCLUSIVE",
    "FAIR",
    "READ_PREFERRING",
    "SHARED",
    "HolderStatus",
    "Lease",
    "LockError",
    "LockProtocolError",
    "LockStatus",
    "LockTimeout",
    "LockUnavailable",
    "Mode",
    "OwnerInfo",
    "Policy",
    "RWLock",
    "WaiterStatus",
]
