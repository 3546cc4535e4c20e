"""Free loopback ports, picked the one way the embedded Redis picks its own (never 6379)."""

from __future__ import annotations

from workers._embedded_redis import _free_port


def free_port() -> int:
    """A loopback TCP port nothing listens on now; the kernel's pick, never 6379."""
    return _free_port()


def free_port_url() -> str:
    """A Redis URL where nothing listens (never the standard port)."""
    return f"redis://127.0.0.1:{free_port()}/0"
