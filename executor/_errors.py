"""Every public exception of toolpool, in one module, under one base: ``ToolpoolError``::

    ToolpoolError
    ├── ConfigurationError        bad settings, a registry import string that does not load
    ├── ToolDefinitionError       a tool declared wrongly (bad name, schema that is not JSON Schema)
    ├── DuplicateToolError        two tools registered under one name
    ├── UnknownToolError          a look-up of a name the registry does not hold
    │   └── NotServedOnQueue      no live worker on the queue serves it (or they withhold it)
    ├── InvalidArgumentsError     arguments that fail a tool's parameter schema
    ├── NoWorkerError             no live worker serves the queue: nothing was submitted
    ├── RedisUnavailable          the orchestrator could not reach Redis (names the turn)
    ├── SessionError              a session name that is invalid, unknown, taken or busy
    ├── TurnError                 a turn that cannot be submitted as given (two calls, one id)
    ├── LockError                 the distributed lock could not do what was asked
    │   ├── LockTimeout           no grant before the timeout; the waiter has left the queue
    │   ├── LockUnavailable       Redis could not be reached long enough to take or free it
    │   └── LockProtocolError     a script answered with a code this version does not know
    └── ToolError                 raised *inside* a tool: an expected failure whose message is
        │                         shown to the model as it is ("File not found: a.txt")
        ├── WorkspaceError        a path that escapes the workspace root
        ├── FenceError            a fenced commit refused because the lock was lost
        ├── ToolTimeoutError      the tool's own time limit stopped the call (kind timeout)
        └── ToolCancelledError    the tool stopped because its call was cancelled (cancelled)

``executor`` exports all but the lock's, which ``executor.lock`` exports with the lock. Two
worker-side subclasses stay with their code, since they never reach an orchestrator (each
becomes a call's result): ``workers.pool._process.NotServedError`` (an ``UnknownToolError``: a
tool the worker withholds) and ``workers._commit.CommitBusy`` (a ``ToolError``: the
workspace's commit lock not had in time). ``executor.wire._acks.NotAcknowledged`` (a write too few
replicas took in time) stays with the acknowledgements: it is a redis-py ``ConnectionError``
too, and importing an error must not import redis.

Errors raised inside a tool never escape the runner: they become a ``ToolResult`` with
``status="error"`` (see ``workers.pipeline._runner``). A lease lost while held is not an
exception either: it is reported on the ``Lease`` (``lost``, ``lost_event``, ``on_lost``), and
a fenced commit then raises ``FenceError``. Messages a model reads come from
``executor._texts``.
"""

from __future__ import annotations

from collections.abc import Iterable

from executor import _texts as texts


class ToolpoolError(Exception):
    """Base class of every exception toolpool raises on purpose."""


class ConfigurationError(ToolpoolError):
    """Settings or a registry import string that cannot be used."""


class ToolDefinitionError(ToolpoolError):
    """A tool declared in a way toolpool cannot serve."""


class DuplicateToolError(ToolpoolError):
    """A second tool registered under a name that is taken."""


class UnknownToolError(ToolpoolError):
    """A tool name that the registry does not hold."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = sorted(available)
        super().__init__(texts.unknown_tool(name, self.available))


class NotServedOnQueue(UnknownToolError):
    """A tool that the live workers on the queue do not serve (``reason``: why, if known)."""

    def __init__(
        self, name: str, available: Iterable[str], queue: str, reason: str | None = None
    ) -> None:
        super().__init__(name, available)
        self.queue = queue
        self.reason = reason
        if reason is None:
            self.args = (texts.not_on_queue(name, self.available, queue),)
        else:
            self.args = (texts.withheld_on_queue(name, queue, reason, self.available),)


class SessionError(ToolpoolError):
    """A session that cannot be used or managed as asked: bad name, unknown, taken, busy."""


class ToolError(ToolpoolError):
    """An expected failure inside a tool; its message is what the model reads."""


class WorkspaceError(ToolError):
    """A path that resolves outside the workspace root."""


class FenceError(ToolError):
    """A write refused because this call no longer holds the exclusive lock."""


class ToolTimeoutError(ToolError):
    """A tool stopped by its own time limit (bash's ``timeout``): answered ``timeout``."""


class ToolCancelledError(ToolError):
    """A tool that stopped because its call was cancelled (it saw ``ctx.cancelled``):
    answered ``cancelled``."""


class InvalidArgumentsError(ToolpoolError):
    """Arguments that do not match a tool's parameters; ``problems`` lists each one."""

    def __init__(self, tool_name: str, problems: list[str]) -> None:
        self.tool_name = tool_name
        self.problems = problems
        super().__init__(f"Invalid arguments for tool {tool_name!r}: " + "; ".join(problems))


class NoWorkerError(ToolpoolError):
    """No live worker serves the queue: nothing would run a call put on it."""

    def __init__(self, queue: str, waited: float = 0.0) -> None:
        self.queue = queue
        within = f" within {waited:g} s" if waited else ""
        super().__init__(
            f"No live worker serves queue {queue!r}{within}, so no call was submitted. Start "
            "workers with `toolpool worker --redis URL --workspace DIR` (or `toolpool up`), "
            "or wait for them (Executor(wait_for_workers=SECONDS), `--wait-for-workers`)."
        )


class TurnError(ToolpoolError):
    """A turn that cannot be submitted as given (e.g. two calls with one id)."""


class RedisUnavailable(ToolpoolError):
    """Redis could not be reached; ``turn_id`` names the turn concerned, if one exists."""

    def __init__(self, message: str, turn_id: str | None = None) -> None:
        super().__init__(message)
        self.turn_id = turn_id


class LockError(ToolpoolError):
    """The lock could not do what was asked."""


class LockTimeout(LockError):
    """No grant came before the timeout; the waiter left the queue and woke whoever it blocked."""


class LockUnavailable(LockError):
    """Redis could not be reached long enough to take, prove or free the lock."""


class LockProtocolError(LockError):
    """A lock script returned a code this version of toolpool does not know."""
