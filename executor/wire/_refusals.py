"""The answers to a call that cannot run as given: ``unknown_tool`` and ``invalid_arguments``.

The client answers them before enqueueing (no round trip) and the worker again before running
(its registry has the last word); both build them here, from ``executor._texts``, so a model
reads the same either way.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

from executor import _texts as texts
from executor._errors import UnknownToolError
from executor.wire._models import ErrorType, ToolCall, ToolResult


def unknown_tool_text(exc: UnknownToolError) -> str:
    """What the model reads for a tool that is not served: the tools it can call instead,
    and the one it most likely meant (``read_fil``: ``read_file``), if one is close."""
    # A withheld tool (``reason``) was named right; another name would be the wrong hint.
    meant = None if getattr(exc, "reason", None) else _closest_name(exc.name, exc.available)
    return texts.unknown_tool_answer(str(exc), meant)


def _closest_name(name: str, available: Iterable[str]) -> str | None:
    """The name in ``available`` closest to ``name``, ignoring case and a namespace prefix
    (``functions.read_file``), if any is close."""
    by_folded = {candidate.casefold(): candidate for candidate in available}
    folded = name.casefold()
    bare = re.split(r"[.:/]", folded)[-1]
    if bare in by_folded:
        return by_folded[bare]
    for wanted in dict.fromkeys((folded, bare)):
        close = difflib.get_close_matches(wanted, list(by_folded), n=1, cutoff=0.6)
        if close:
            return by_folded[close[0]]
    return None


def invalid_arguments_text(tool_name: str, problems: Sequence[str]) -> str:
    """What the model reads for arguments that do not fit: each problem, then what to do."""
    return texts.invalid_arguments_answer(tool_name, problems)


def unknown_tool(call: ToolCall, exc: UnknownToolError) -> ToolResult:
    """The ``unknown_tool`` result for ``call``."""
    return ToolResult.failure(call.id, call.name, ErrorType.UNKNOWN_TOOL, unknown_tool_text(exc))


def invalid_arguments(call: ToolCall, problems: Sequence[str]) -> ToolResult:
    """The ``invalid_arguments`` result for ``call``."""
    text = invalid_arguments_text(call.name, problems)
    return ToolResult.failure(call.id, call.name, ErrorType.INVALID_ARGUMENTS, text)
