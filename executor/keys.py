"""Every Redis key name toolpool uses, built in one place from one prefix.

Nothing else in toolpool spells a key: a component asks ``Keys`` for the names it needs, so a
deployment can move all of toolpool's data under another prefix with one setting
(``TOOLPOOL_KEY_PREFIX``), and a reader can see the whole key layout here.

Layout (prefix ``toolpool``, lock scope ``global``)::

    {toolpool:lock:global}:holders       ZSET  token -> lease expiry (ms, Redis server clock)
    {toolpool:lock:global}:holder_info   HASH  token -> JSON {mode, fence, acquired_at_ms, owner}
    {toolpool:lock:global}:queue         ZSET  token -> ticket (FIFO order of every waiter)
    {toolpool:lock:global}:writers       ZSET  token -> ticket (the exclusive waiters only)
    {toolpool:lock:global}:deadlines     ZSET  token -> waiter liveness deadline (ms)
    {toolpool:lock:global}:waiter_info   HASH  token -> JSON {mode, enqueued_at_ms, owner}
    {toolpool:lock:global}:stats         HASH  counter name -> count
    {toolpool:lock:global}:seq           STRING last ticket handed out
    {toolpool:lock:global}:fence         STRING last fencing token handed out
    {toolpool:lock:global}:wake:<token>  LIST  one waiter's wake-up signal
    {toolpool:lock:global}:lost:<token>  STRING marks a lost lease already counted

All keys of one lock scope share the hash tag ``{<prefix>:lock:<scope>}``, so the scope's
scripts touch one cluster slot (the per-token wake and lost keys are built inside the scripts
from ``wake_prefix`` and ``lost_prefix`` and carry the same tag).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "toolpool"
DEFAULT_SCOPE = "global"

# Braces would move a key out of its hash tag; whitespace and ':' would make names ambiguous.
_FORBIDDEN = frozenset("{}: \t\r\n")


def _check_part(kind: str, value: str) -> str:
    if not value or any(ch in _FORBIDDEN for ch in value):
        raise ValueError(
            f"Invalid {kind} {value!r}: use a non-empty name without braces, colons or spaces."
        )
    return value


@dataclass(frozen=True)
class LockKeys:
    """The key names of one lock scope; ``script_keys()`` is the KEYS list every script takes."""

    scope: str
    tag: str

    @property
    def holders(self) -> str:
        return f"{self.tag}:holders"

    @property
    def holder_info(self) -> str:
        return f"{self.tag}:holder_info"

    @property
    def queue(self) -> str:
        return f"{self.tag}:queue"

    @property
    def writers(self) -> str:
        return f"{self.tag}:writers"

    @property
    def deadlines(self) -> str:
        return f"{self.tag}:deadlines"

    @property
    def waiter_info(self) -> str:
        return f"{self.tag}:waiter_info"

    @property
    def stats(self) -> str:
        return f"{self.tag}:stats"

    @property
    def seq(self) -> str:
        return f"{self.tag}:seq"

    @property
    def fence(self) -> str:
        return f"{self.tag}:fence"

    @property
    def wake_prefix(self) -> str:
        """What the scripts prepend to a token to name its wake list."""
        return f"{self.tag}:wake:"

    @property
    def lost_prefix(self) -> str:
        """What release.lua prepends to a token to mark its loss as counted."""
        return f"{self.tag}:lost:"

    def wake(self, token: str) -> str:
        """The wake list of one waiter (the same name the scripts derive)."""
        return self.wake_prefix + token

    def script_keys(self) -> list[str]:
        """KEYS[1..9] in the order ``executor/lock/lua/_prelude.lua`` names them."""
        return [
            self.holders,
            self.holder_info,
            self.queue,
            self.writers,
            self.deadlines,
            self.waiter_info,
            self.stats,
            self.seq,
            self.fence,
        ]


@dataclass(frozen=True)
class Keys:
    """Key names under one prefix; add a method here for each new kind of key."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        _check_part("key prefix", self.prefix)

    def lock(self, scope: str = DEFAULT_SCOPE) -> LockKeys:
        """The keys of the reader/writer lock of ``scope``."""
        _check_part("lock scope", scope)
        return LockKeys(scope=scope, tag=f"{{{self.prefix}:lock:{scope}}}")
