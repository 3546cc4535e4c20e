"""Counting Redis round trips in one process, and choosing redis-py's reply parser.

A round trip is one ``send_packed_command`` on a redis-py connection: in redis-py 8 every
single command (a blocking BLMOVE, an EVALSHA, a connection's handshake and health-check PING
included) and every pipeline's ``execute`` goes through exactly one such call, and the reply
is read after it. ``install`` wraps that method on the connection classes, for the whole
process; a thread inside ``paused()`` (the benchmark's own bookkeeping, the reporter below) is
not counted.

A worker process reports its count through ``Reporter``: the benchmark pushes a token on
``bench:trips:ask:<worker>`` and the reporter thread answers in the hash
``bench:trips:<worker>`` (token, count, parsers seen), so a snapshot is exact, not periodic.

Kept free of toolpool's code: spawned worker processes import it before they start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis import connection as redis_connection
from redis._parsers import _RESP2Parser, _RESP3Parser

# redis-py's parser for RESP2 in pure Python, and hiredis's; DefaultParser is the latter
# whenever the hiredis package is importable.
PYTHON_PARSER = "python"
DEFAULT_PARSER = "default"
PARSERS = (DEFAULT_PARSER, PYTHON_PARSER)
ASK_PREFIX = "bench:trips:ask:"
ANSWER_PREFIX = "bench:trips:"
_ASK_WAIT_S = 1


class _State:
    """The process-wide counter, the parser choice and the threads that are not counted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.parsers: set[str] = set()
        self.local = threading.local()
        self.installed = False
        self.force_python = False
        self.originals: list[tuple[type[Any], str, Any]] = []


_STATE = _State()


def hiredis_available() -> bool:
    """Whether redis-py picks hiredis by default in this process."""
    return redis_connection.DefaultParser.__name__ == "_HiredisParser"


def install() -> None:
    """Count every round trip of this process from now on (idempotent)."""
    if _STATE.installed:
        return
    classes: list[type[Any]] = [redis_connection.AbstractConnection]
    # A concrete class that defines its own method would bypass the base class's wrapper.
    for name in ("Connection", "UnixDomainSocketConnection", "SSLConnection"):
        cls = getattr(redis_connection, name, None)
        if cls is not None:
            classes.append(cls)
    for cls in classes:
        for name, wrap in (("send_packed_command", _counted), ("set_parser", _chosen)):
            if name in vars(cls):
                original = vars(cls)[name]
                _STATE.originals.append((cls, name, original))
                setattr(cls, name, wrap(original))
    _STATE.installed = True


def uninstall() -> None:
    """Put redis-py's methods back and forget the counts (for tests)."""
    for cls, name, original in reversed(_STATE.originals):
        setattr(cls, name, original)
    _STATE.originals.clear()
    _STATE.installed = _STATE.force_python = False
    with _STATE.lock:
        _STATE.count = 0
        _STATE.parsers.clear()


def _counted(send: Callable[..., None]) -> Callable[..., None]:
    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        if not getattr(_STATE.local, "paused", False):
            parser = type(getattr(self, "_parser", None)).__name__
            with _STATE.lock:
                _STATE.count += 1
                _STATE.parsers.add(parser)
        send(self, command, check_health)

    return send_packed_command


def _chosen(set_parser: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    # ``parser_class`` is the connection's documented choice of parser; redis-py passes its
    # default (hiredis when installed) through set_parser when a connection is made.
    def chosen(self: Any, parser_class: Any) -> None:
        if _STATE.force_python and parser_class.__name__ == "_HiredisParser":
            resp3 = getattr(self, "protocol", 2) in (3, "3")
            parser_class = _RESP3Parser if resp3 else _RESP2Parser
        set_parser(self, parser_class)

    return chosen


def use_parser(name: str) -> None:
    """Connections made from now on use ``name``'s parser ("python" or "default")."""
    if name not in PARSERS:
        raise ValueError(f"unknown parser {name!r}: use one of {', '.join(PARSERS)}")
    install()
    _STATE.force_python = name == PYTHON_PARSER


def count() -> int:
    """Round trips counted so far in this process."""
    with _STATE.lock:
        return _STATE.count


def parsers_seen(reset: bool = False) -> set[str]:
    """The parser classes of the connections that made the counted round trips."""
    with _STATE.lock:
        seen = set(_STATE.parsers)
        if reset:
            _STATE.parsers.clear()
        return seen


@contextmanager
def paused() -> Iterator[None]:
    """Round trips of this thread inside the block are not counted."""
    before = getattr(_STATE.local, "paused", False)
    _STATE.local.paused = True
    try:
        yield
    finally:
        _STATE.local.paused = before


_STOP = "stop"


class Reporter(threading.Thread):
    """A worker process's answerer: each token pushed on its ask key gets the count back."""

    def __init__(self, url: str, name: str) -> None:
        super().__init__(name="bench-trips-reporter", daemon=True)
        self.client = redis.Redis.from_url(url, socket_timeout=_ASK_WAIT_S + 5)
        self.ask = ASK_PREFIX + name
        self.answer = ANSWER_PREFIX + name

    def run(self) -> None:
        with paused():
            try:
                self._serve()
            except redis.ConnectionError:
                return  # the benchmark's Redis is gone: the process is ending

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread (its blocking read leaves the Redis) and close its connection."""
        with paused():
            self.client.rpush(self.ask, _STOP)
        self.join(timeout)
        self.client.close()

    def _serve(self) -> None:
        while True:
            popped = self.client.blpop([self.ask], timeout=_ASK_WAIT_S)
            if popped is None:
                continue
            token = popped[1]
            if token == _STOP.encode():
                return
            parsers = ",".join(sorted(parsers_seen()))
            self.client.hset(
                self.answer, mapping={"count": count(), "parsers": parsers, "token": token}
            )


def start_reporting(url: str, name: str, parser: str) -> None:
    """In a worker process: count its round trips, use ``parser``, answer the benchmark."""
    use_parser(parser)
    Reporter(url, name).start()


def snapshot(client: redis.Redis, names: list[str], patience_s: float = 10.0) -> dict[str, int]:
    """Each named worker's round trips so far, asked of its reporter and waited for.

    Not counted here (the benchmark's bookkeeping); raises ``TimeoutError`` naming the worker
    whose reporter did not answer within ``patience_s``.
    """
    with paused():
        tokens: dict[str, bytes] = {}
        for name in names:
            token = f"{name}:{time.monotonic_ns()}"
            client.rpush(ASK_PREFIX + name, token)
            tokens[name] = token.encode()
        deadline = time.monotonic() + patience_s
        counts: dict[str, int] = {}
        for name in names:
            while True:
                answer: list[Any] = client.hmget(ANSWER_PREFIX + name, ["token", "count"])
                token, value = answer
                if token == tokens[name] and value is not None:
                    counts[name] = int(value)
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker {name} did not report its round trips")
                time.sleep(0.001)
        return counts


def worker_parsers(client: redis.Redis, names: list[str]) -> set[str]:
    """The parsers each named worker's connections used, as of its last report."""
    seen: set[str] = set()
    with paused():
        for name in names:
            raw: Any = client.hget(ANSWER_PREFIX + name, "parsers")
            if raw:
                seen.update(bytes(raw).decode().split(","))
    return seen
