"""Keep full output: the worker's keeper stores the whole text; Redis away only loses the note."""

from __future__ import annotations

import socket

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from executor import Settings, ToolCall
from executor.wire import Keys, ResultStore
from workers.pipeline._keep import FullOutputKeeper


def test_the_full_output_is_stored_and_the_note_names_it(client: redis.Redis) -> None:
    results = ResultStore(client, Keys())
    keep = FullOutputKeeper(results, Settings(full_output_ttl=60))
    note = keep(ToolCall(id="big", name="t"), "x" * 1000)
    assert note == "full output: toolpool output big"
    assert results.full_output("big") == "x" * 1000
    assert 0 < client.ttl(Keys().full_output("big")) <= 60


def test_the_stored_output_is_capped_by_the_settings(client: redis.Redis) -> None:
    results = ResultStore(client, Keys())
    keep = FullOutputKeeper(results, Settings(full_output_max_bytes=10))
    note = keep(ToolCall(id="big", name="t"), "y" * 1000)
    assert note == "full output: toolpool output big (its first 10 bytes)"
    assert results.full_output("big") == "y" * 10


def test_redis_away_gives_no_note_and_no_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    away = redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    keep = FullOutputKeeper(ResultStore(away, Keys()), Settings())
    assert keep(ToolCall(id="big", name="t"), "z" * 1000) is None
    away.close()
