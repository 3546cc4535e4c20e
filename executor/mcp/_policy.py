"""What the MCP server lets its clients run: the same for ``tools/call`` and ``/turns``.

A server shared by many clients decides for them which tools they see and which calls run:

- ``allow`` / ``deny``: tool names offered, or withheld (a withheld tool is not listed, and a
  call naming it is refused);
- ``read_only``: only tools flagged read-only;
- ``check``: ``check(call, tool) -> reason | None``, loaded from ``module:function``, asked for
  every call (a reason refuses it);
- ``approve``: ``approve(call, tool) -> bool``, loaded from ``module:function``, asked for
  every call that is not read-only (False refuses it).

A refused call is answered ``rejected`` with the reason; in a ``/turns`` turn, as with
``Executor``, the calls after it are answered ``rejected`` too ("the turn stopped at ...").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from executor._errors import ConfigurationError
from executor.contract import ToolInfo
from executor.contract._registry import import_object
from executor.wire import ToolCall

Check = Callable[[ToolCall, ToolInfo], "str | None"]
Approve = Callable[[ToolCall, ToolInfo], bool]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerPolicy:
    """The server's rules for its clients' calls (none by default: everything runs)."""

    allow: frozenset[str] | None = None
    deny: frozenset[str] = field(default_factory=frozenset)
    read_only: bool = False
    check: Check | None = None
    approve: Approve | None = None

    @classmethod
    def build(
        cls,
        *,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        read_only: bool = False,
        check: str | None = None,
        approve: str | None = None,
    ) -> ServerPolicy:
        """A policy from the command line's values; ``ConfigurationError`` naming a hook that
        does not load or is not callable, or a tool both allowed and denied."""
        allowed = frozenset(allow) or None
        denied = frozenset(deny)
        both = sorted((allowed or frozenset()) & denied)
        if both:
            raise ConfigurationError(f"Tool(s) both allowed and denied: {', '.join(both)}")
        return cls(
            allow=allowed,
            deny=denied,
            read_only=read_only,
            check=_hook(check, "check hook") if check else None,
            approve=_hook(approve, "approval hook") if approve else None,
        )

    def offers(self, tool: ToolInfo) -> bool:
        """Whether clients see and may call ``tool`` at all."""
        if self.allow is not None and tool.name not in self.allow:
            return False
        return tool.name not in self.deny and (tool.is_read_only or not self.read_only)

    def refusal(self, call: ToolCall, tool: ToolInfo) -> str | None:
        """Why ``call`` may not run (the ``Executor``'s ``check``), or None. A hook that
        raises refuses the call, saying so: a broken policy must not let calls through."""
        if not self.offers(tool):
            return f"this server does not offer {tool.name!r} to its clients"
        try:
            if self.check is not None and (reason := self.check(call, tool)):
                return str(reason)
            if self.approve is not None and not tool.is_read_only and not self.approve(call, tool):
                return "the server's approval hook refused it"
        except Exception as exc:  # a hook's own bug: its message names it
            log.exception("toolpool mcp: a policy hook failed on call %s", call.id)
            return f"the server's policy hook failed ({type(exc).__name__}: {exc})"
        return None


def _hook(spec: str, what: str) -> Any:
    hook = import_object(spec, what, "mypkg.policy:check")
    if not callable(hook):
        raise ConfigurationError(f"The {what} {spec!r} is {type(hook).__name__}, not a function")
    return hook
