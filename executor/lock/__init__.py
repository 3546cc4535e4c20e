"""toolpool's distributed reader/writer lock on Redis (fair, leased, fenced).

Typical use::

    lock = RWLock(redis.Redis.from_url(url), scope="global")
    with lock.acquire("exclusive", timeout=30, owner=OwnerInfo.current(tool="write_file")) as lease:
        ...                      # write a temp file
        lease.assert_fenced()    # raises FenceError if the lock was lost meanwhile
        ...                      # rename it into place
"""

from executor.lock.errors import LockError, LockProtocolError, LockTimeout, LockUnavailable
from executor.lock.keeper import LeaseKeeper
from executor.lock.lease import Lease
from executor.lock.models import (
    EXCLUSIVE,
    FAIR,
    READ_PREFERRING,
    SHARED,
    HolderStatus,
    LockCounters,
    LockStatus,
    Mode,
    OwnerInfo,
    Policy,
    WaiterStatus,
)
from executor.lock.rwlock import RWLock, new_token
from executor.lock.scripts import (
    AcquireOutcome,
    AcquireReply,
    CancelOutcome,
    LockScripts,
    ReleaseOutcome,
    RenewOutcome,
)

__all__ = [
    "EXCLUSIVE",
    "FAIR",
    "READ_PREFERRING",
    "SHARED",
    "AcquireOutcome",
    "AcquireReply",
    "CancelOutcome",
    "HolderStatus",
    "Lease",
    "LeaseKeeper",
    "LockCounters",
    "LockError",
    "LockProtocolError",
    "LockScripts",
    "LockStatus",
    "LockTimeout",
    "LockUnavailable",
    "Mode",
    "OwnerInfo",
    "Policy",
    "RWLock",
    "ReleaseOutcome",
    "RenewOutcome",
    "WaiterStatus",
    "new_token",
]
