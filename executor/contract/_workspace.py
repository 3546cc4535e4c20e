"""The workspace root that every file tool's paths are resolved against."""

from __future__ import annotations

import os
from pathlib import Path

from executor._errors import WorkspaceError


class Workspace:
    """A folder that tools may touch; any path that leaves it is refused.

    Paths are resolved with symbolic links followed (``realpath``), so a link inside the
    workspace that points outside is refused like ``..`` or a foreign absolute path.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        resolved = Path(os.path.realpath(root))
        if not resolved.is_dir():
            raise WorkspaceError(f"Workspace root {str(root)!r} is not a directory.")
        self.root = resolved

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    def resolve(self, path: str) -> Path:
        """The absolute, link-free path for ``path``; raises ``WorkspaceError`` outside the root.

        Relative paths are taken from the root. The path need not exist (write_file creates
        files), but every existing part of it is resolved.
        """
        if "\x00" in path:
            raise WorkspaceError("Path contains a NUL character; give a plain file path.")
        candidate = _expand_home(path)
        joined = candidate if candidate.is_absolute() else self.root / candidate
        resolved = Path(os.path.realpath(joined))
        if resolved != self.root and self.root not in resolved.parents:
            raise WorkspaceError(
                f"Path {path!r} is outside the workspace ({self.root}). "
                "Use a path inside the workspace, relative to its root."
            )
        return resolved

    def relative(self, path: Path) -> str:
        """``path`` as shown to the model: relative to the root, ``.`` for the root itself."""
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return str(path)
        return str(rel) if str(rel) != "." else "."


def _expand_home(path: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; as a shell does, a ``~name`` of no
    known user stays a plain name (Path.expanduser raises for it)."""
    if not path.startswith("~"):
        return Path(path)
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)
