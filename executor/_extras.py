"""How a message tells a person to install one of toolpool's extras."""

from __future__ import annotations


def install_extra(extra: str) -> str:
    """The install line for ``extra``: toolpool is on no package index, so it is named by the
    place it comes from."""
    return (
        f"pip install 'toolpool[{extra}]', naming toolpool by its checkout's path, a git URL or "
        "a wheel (docs/install.md)"
    )
