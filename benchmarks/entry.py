"""How a benchmark script runs: Ctrl-C and SIGTERM stop it cleanly, failures are one line.

Shared by the benchmark scripts: the first interrupt stops the measuring (later ones are
ignored, so the clean-up of workers and Redis finishes); exit code 0 when done, 1 when it
failed, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import redis

_INTERRUPTED = threading.Event()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """First Ctrl-C or SIGTERM: stop measuring; later ones are ignored so clean-up finishes."""
    _INTERRUPTED.set()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def run_bench(
    run: Callable[[], None],
    failures: tuple[type[Exception], ...],
    stopped: str = "workers and Redis stopped",
) -> int:
    """Run a benchmark; ``failures`` are the errors that end it with a one-line message;
    ``stopped`` says what was cleaned up after an interrupt."""
    saved = signal.signal(signal.SIGINT, _interrupt), signal.signal(signal.SIGTERM, _interrupt)
    _INTERRUPTED.clear()
    started = time.monotonic()
    try:
        run()
    except (KeyboardInterrupt, redis.RedisError) as exc:
        # Ctrl-C reaches our redis-server too (same process group), so the first sign of it
        # may be a closed connection rather than KeyboardInterrupt.
        if not _INTERRUPTED.is_set():
            print(f"\nbenchmark failed: Redis error: {exc}", file=sys.stderr)
            return 1
        print(f"\ninterrupted: {stopped}", file=sys.stderr)
        return 130
    except failures as exc:
        print(f"\nbenchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        # Called in-process (the benchmarks' tests), the caller keeps its own handlers.
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])
    print(f"\n(total {time.monotonic() - started:.1f} s)")
    return 0


def at_least(minimum: int) -> Callable[[str], int]:
    """An ``argparse`` type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse
