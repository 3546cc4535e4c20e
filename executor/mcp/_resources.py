"""The workspace's files as read-only MCP resources, read through the pool.

``resources/list`` walks the workspace with ``list_directory`` calls and ``resources/read``
reads a file with a ``read_file`` call, each a turn on the pool like a model's call: so the
server needs no copy of the workspace (it may run on another machine than the workers, and a
session's folder lives on the host that serves it), the paths are confined by the workers'
own code (``..``, absolute paths and links out are refused), a read waits for a write in
flight as a model's read would, and the server's policy and ``--check`` hook apply.

A file's URI is ``toolpool://workspace/PATH`` (``PATH`` relative to the workspace root,
percent-encoded). The list is the files in depth-first order, directories' entries sorted by
name; symbolic links are left out (read through one, a link is confined like any path). A page
holds ``page_size`` files; its ``nextCursor`` is the last path listed, so a listing that goes
on after the tree changed neither repeats nor skips what did not move. A read answers what
``read_file`` answers: up to its line limit of text, long lines and long results cut, with its
note saying how much is left; binary files are refused (``read_file`` shows text only).
"""

from __future__ import annotations

import bisect
import mimetypes
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

from executor.wire import ErrorType, ToolCall, ToolResult

PREFIX = "toolpool://workspace/"
TEMPLATE = PREFIX + "{+path}"
PAGE_SIZE = 100
# read_file's own most lines per call.
READ_LINES = 2000
# The tools a resource request calls.
NEEDED = ("list_directory", "read_file")
# The 2025 protocol's code for a resource that does not exist (no JSON-RPC standard one).
RESOURCE_NOT_FOUND = -32002

RunCall = Callable[[ToolCall], ToolResult]


def uri_of(path: str) -> str:
    return PREFIX + quote(path)


def path_of(uri: str) -> str:
    """The workspace path a resource URI names; an ``MCPError`` saying what is wrong."""
    if not uri.startswith(PREFIX):
        raise MCPError(
            INVALID_PARAMS,
            f"Unknown resource {uri!r}: this server's resources are the workspace's files, "
            f"{TEMPLATE} (resources/list names them).",
        )
    path = unquote(uri.removeprefix(PREFIX))
    if not path:
        raise MCPError(INVALID_PARAMS, f"{uri!r} names no file: add its path after {PREFIX}.")
    return path


def resource(path: str) -> types.Resource:
    return types.Resource(
        uri=uri_of(path),
        name=path,
        title=path.rsplit("/", 1)[-1],
        mime_type=mimetypes.guess_type(path)[0],
    )


def template() -> types.ResourceTemplate:
    return types.ResourceTemplate(
        uri_template=TEMPLATE,
        name="workspace file",
        description="A file of the pool's workspace, by its path relative to the workspace "
        "root; read through read_file (text only, long files cut with a note).",
    )


@dataclass
class _Folder:
    """A directory being walked: its path and sorted entries (names; directories end in /),
    and the next entry to visit."""

    path: str
    entries: list[str]
    next: int = 0


def _join(folder: str, name: str) -> str:
    return name if folder == "." else f"{folder}/{name}"


class Resources:
    """The resource requests of one MCP server, each answered with ``run(call)`` (a turn of
    one call on the pool, in the request's session)."""

    def __init__(self, run: RunCall, *, page_size: int = PAGE_SIZE) -> None:
        self._run = run
        self.page_size = page_size

    def list_page(self, cursor: str | None) -> types.ListResourcesResult:
        """A page of files, from the one after ``cursor`` (the last path of the page before)."""
        stack = [self._folder(".", required=True)] if cursor is None else self._resume(cursor)
        found: list[types.Resource] = []
        while stack and len(found) < self.page_size:
            folder = stack[-1]
            if folder.next >= len(folder.entries):
                stack.pop()
                continue
            name = folder.entries[folder.next]
            folder.next += 1
            path = _join(folder.path, name.removesuffix("/"))
            if name.endswith("/"):
                stack.append(self._folder(path))
            else:
                found.append(resource(path))
        more = any(folder.next < len(folder.entries) for folder in stack)
        return types.ListResourcesResult(
            resources=found, next_cursor=found[-1].name if found and more else None
        )

    def _resume(self, cursor: str) -> list[_Folder]:
        """The walk's stack just after path ``cursor``: each of its folders, listed, with the
        entry after the cursor's next."""
        parts = [part for part in cursor.split("/") if part]
        if not parts or any(part in (".", "..") for part in parts):
            raise MCPError(
                INVALID_PARAMS,
                f"Invalid cursor {cursor!r}: pass the nextCursor of the page before, as given.",
            )
        stack: list[_Folder] = []
        folder = "."
        for index, part in enumerate(parts):
            listed = self._folder(folder, required=index == 0)
            names = [entry.removesuffix("/") for entry in listed.entries]
            last = index == len(parts) - 1
            # Past the part itself: its folder's walk continues after it (the part was done).
            listed.next = bisect.bisect_right(names, part)
            if not last and listed.next > 0 and names[listed.next - 1] == part:
                # The folder the cursor is in: walk its rest first, then the siblings after.
                stack.append(listed)
                folder = _join(folder, part)
                continue
            stack.append(listed)
            break
        return stack

    def _folder(self, path: str, *, required: bool = False) -> _Folder:
        """A directory's entries, sorted, links left out; a folder gone since it was seen is
        empty, but the workspace root must answer."""
        result = self._run(ToolCall(name="list_directory", arguments={"path": path}))
        if result.is_error:
            if required:
                raise _pool_error(result, f"listing the workspace ({path})")
            return _Folder(path, [])
        text = result.content
        if text.startswith("Directory ") and text.endswith(" is empty."):
            return _Folder(path, [])
        entries = [line for line in text.splitlines() if line and " -> " not in line]
        return _Folder(path, sorted(entries, key=lambda entry: entry.removesuffix("/")))

    def read(self, uri: str) -> types.ReadResourceResult:
        """A file's text, as ``read_file`` answers it."""
        path = path_of(uri)
        result = self._run(
            ToolCall(name="read_file", arguments={"path": path, "offset": 0, "limit": READ_LINES})
        )
        if result.is_error:
            raise _pool_error(result, f"reading {uri}")
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=uri,
                    mime_type=mimetypes.guess_type(path)[0] or "text/plain",
                    text=result.content,
                )
            ]
        )


def _pool_error(result: ToolResult, doing: str) -> MCPError:
    """An error result of the pool as the JSON-RPC error of a resource request."""
    text = result.content
    if result.error_type is ErrorType.TOOL_ERROR and text.startswith("File not found"):
        return MCPError(RESOURCE_NOT_FOUND, text)
    if result.error_type in (ErrorType.TOOL_ERROR, ErrorType.INVALID_ARGUMENTS):
        # A path outside the workspace, a directory, a binary file: the request was wrong.
        return MCPError(INVALID_PARAMS, text)
    kind = result.error_type.value if result.error_type else result.status.value
    return MCPError(INTERNAL_ERROR, f"The pool could not answer {doing} ({kind}): {text}")
