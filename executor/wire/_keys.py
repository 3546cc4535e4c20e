"""Every Redis key name toolpool uses, built in one place from one prefix.

Nothing else in toolpool spells a key: a component asks ``Keys`` for the names it needs, so a
deployment can move all of toolpool's data under another prefix with one setting
(``TOOLPOOL_KEY_PREFIX``), and a reader can see the whole key layout here.

Layout (prefix ``toolpool``, lock scope ``global``)::

    {toolpool:lock:global}:holders       ZSET  token -> lease expiry (ms, Redis server clock)
    {toolpool:lock:global}:holder_info   HASH  token -> JSON {mode, epoch, seq, lease_ms,
                                                           acquired_at_ms, owner}
    {toolpool:lock:global}:queue         ZSET  token -> ticket (FIFO order of every waiter)
    {toolpool:lock:global}:writers       ZSET  token -> ticket (the exclusive waiters only)
    {toolpool:lock:global}:deadlines     ZSET  token -> waiter liveness deadline (ms)
    {toolpool:lock:global}:waiter_info   HASH  token -> JSON {mode, enqueued_at_ms, owner}
    {toolpool:lock:global}:stats         HASH  counter name -> count
    {toolpool:lock:global}:seq           STRING last ticket handed out
    {toolpool:lock:global}:epoch         HASH  replid, epoch, seq: the primary's epoch and its
                                               last exclusive grant (fence = epoch*2^24 + seq)
    {toolpool:lock:global}:wake:<token>  LIST  one waiter's wake-up signal
    {toolpool:lock:global}:lost:<token>  STRING marks a lost lease already counted

Calls and turns (prefix ``toolpool``)::

    toolpool:call:<call_id>              STRING turn id that claimed this call id (NX: ids unique)
    toolpool:result:<call_id>            STRING the call's ToolResult as JSON (first writer wins)
    toolpool:output:<call_id>            STRING the full output of a truncated result
    toolpool:running:<call_id>           STRING worker name; expires unless the worker renews it
    toolpool:turn:<turn_id>              STRING the turn's plan as JSON (call ids, batches, jobs)
    toolpool:turn:<turn_id>:done         LIST   call ids, pushed as their results are stored
    toolpool:turn:<turn_id>:cancel       STRING present once the turn is cancelled
    toolpool:worker:<name>:current       STRING the call a worker runs now (JSON), for its pool
    toolpool:acks                        STRING a counter readers bump before WAIT (acks)
    toolpool:events                      STREAM structured events, capped
    toolpool:catalog                     SET    names of the workers that publish a catalog
    toolpool:catalog:<worker>            STRING that worker's queue and tools (JSON); expires
                                                unless the worker refreshes it
    toolpool:sessions                    SET    names of the sessions that exist
    toolpool:session:<name>              HASH   a session's record: host, state, use, shell state
    toolpool:session:<name>:calls        ZSET   call ids sent to the session -> submit time
    toolpool:session-reply:<request>     LIST   a host's answer to one create or delete
    toolpool:session-sweep:<host>        STRING held by the one worker of a host that sweeps
    toolpool:doorbell:<queue name>       LIST   a token per job put on the RQ queue, for the
                                                workers that wait on several queues (BLPOP)
    RQ queue ``toolpool.<queue>@<host>``  the calls of the sessions that live on ``host``
    RQ queue ``toolpool.<queue>``        RQ's own keys (``rq:queue:toolpool.default``, ...)

All keys of one lock scope share the hash tag ``{<prefix>:lock:<scope>}``, so the scope's
scripts touch one cluster slot (the per-token wake and lost keys are built inside the scripts
from ``wake_prefix`` and ``lost_prefix`` and carry the same tag).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "toolpool"
DEFAULT_SCOPE = "global"
DEFAULT_QUEUE = "default"

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
    def epoch(self) -> str:
        return f"{self.tag}:epoch"

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
            self.epoch,
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

    def queue_name(self, queue: str = DEFAULT_QUEUE) -> str:
        """The RQ queue name for ``queue`` under this prefix (RQ builds its own keys from it)."""
        _check_part("queue name", queue)
        return f"{self.prefix}.{queue}"

    def host_queue_name(self, queue: str, host: str) -> str:
        """The RQ queue of the sessions that live on ``host``; only that host's workers take it."""
        _check_part("host name", host)
        if "@" in host:
            raise ValueError(f"Invalid host name {host!r}: it may not contain '@'.")
        return f"{self.queue_name(queue)}@{host}"

    def doorbell(self, queue_name: str) -> str:
        """The doorbell of the RQ queue ``queue_name`` (a full name: ``queue_name()`` or
        ``host_queue_name()``): whoever puts jobs on the queue rings it, and a worker that
        serves several queues waits on their doorbells."""
        return f"{self.prefix}:doorbell:{queue_name}"

    @property
    def sessions_index(self) -> str:
        """The set of session names."""
        return f"{self.prefix}:sessions"

    def session(self, name: str) -> str:
        """A session's record (HASH)."""
        return f"{self.prefix}:session:{name}"

    def session_calls(self, name: str) -> str:
        """The calls sent to a session, by submit time; those without a result still run."""
        return f"{self.prefix}:session:{name}:calls"

    def session_processes(self, name: str) -> str:
        """A session's background processes (HASH: process id -> ``ProcessRecord`` JSON)."""
        return f"{self.prefix}:session:{name}:processes"

    def session_reply(self, request_id: str) -> str:
        """Where a host's worker answers one session create or delete."""
        return f"{self.prefix}:session-reply:{request_id}"

    def session_sweep(self, host: str) -> str:
        """Held, with an expiry, by the one worker of ``host`` that sweeps idle sessions."""
        return f"{self.prefix}:session-sweep:{host}"

    def call_claim(self, call_id: str) -> str:
        """Which turn owns ``call_id``; set once, so two turns cannot share an id."""
        return f"{self.prefix}:call:{call_id}"

    def result(self, call_id: str) -> str:
        """The stored ``ToolResult`` of a call."""
        return f"{self.prefix}:result:{call_id}"

    def full_output(self, call_id: str) -> str:
        """The full output of a call whose result was truncated."""
        return f"{self.prefix}:output:{call_id}"

    def running(self, call_id: str) -> str:
        """Liveness of a running call: present while its worker is alive."""
        return f"{self.prefix}:running:{call_id}"

    def turn(self, turn_id: str) -> str:
        """A submitted turn's plan."""
        return f"{self.prefix}:turn:{turn_id}"

    def turn_done(self, turn_id: str) -> str:
        """Wake-up list: call ids pushed as their results are stored."""
        return f"{self.prefix}:turn:{turn_id}:done"

    def turn_barrier(self, turn_id: str) -> str:
        """Hash: for each batch that has a successor, how many of its calls have no result yet."""
        return f"{self.prefix}:turn:{turn_id}:barrier"

    def turn_cancel(self, turn_id: str) -> str:
        """Present once the turn is cancelled."""
        return f"{self.prefix}:turn:{turn_id}:cancel"

    @property
    def ack_marker(self) -> str:
        """A counter a reader increments so that its WAIT covers what it read (``Acks.confirm``)."""
        return f"{self.prefix}:acks"

    def worker_current(self, worker_name: str) -> str:
        """The call a worker process is running, so its pool can answer it if it dies."""
        return f"{self.prefix}:worker:{worker_name}:current"

    @property
    def catalog_index(self) -> str:
        """The set of worker names that have published a tool catalog."""
        return f"{self.prefix}:catalog"

    def catalog(self, worker_name: str) -> str:
        """One worker's published catalog; it expires unless the worker refreshes it."""
        return f"{self.prefix}:catalog:{worker_name}"

    @property
    def events(self) -> str:
        """The capped stream of structured events."""
        return f"{self.prefix}:events"
