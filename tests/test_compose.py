"""docker-compose.yml's "sentinel" profile, read, and its command lines run without Docker.

There is no Docker engine here: the profile's services are checked as compose would read them
(``docker-compose.yml`` with ``docker-compose.sentinel.yml`` over it), and the shell command
lines they give are run as they are, with their service's variables, against redis-server
processes of our own: loopback addresses and free ports in place of the service names and
ports, a stand-in for the image's entrypoint (``docker-entrypoint.sh``, which only changes
user), ``--bind 127.0.0.1`` after them. Sentinel must then report the primary and the replica.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from contextlib import ExitStack
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.ports import free_port
from tests.support.waiting import PATIENCE_S, wait_for
from workers._embedded_redis import find_redis_server

ROOT = Path(__file__).resolve().parent.parent
SERVICE = "toolpool"
SENTINELS = ("sentinel-1", "sentinel-2", "sentinel-3")
PROFILE_SERVICES = {"redis-replica", *SENTINELS}
SENTINEL_URL = "redis+sentinel://sentinel-1:26379,sentinel-2:26379,sentinel-3:26379/toolpool/0"


def load(name: str) -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the compose files")
    loaded: dict[str, Any] = yaml.safe_load((ROOT / name).read_text())
    return loaded


def services() -> dict[str, Any]:
    """docker-compose.yml's services."""
    found: dict[str, Any] = load("docker-compose.yml")["services"]
    return found


def overrides() -> dict[str, Any]:
    """docker-compose.sentinel.yml's changes to those services."""
    found: dict[str, Any] = load("docker-compose.sentinel.yml")["services"]
    return found


def script(command: list[str]) -> str:
    """The shell script of an ``sh -c`` command line, as the shell gets it from compose."""
    assert command[:2] == ["sh", "-c"]
    return command[2].replace("$$", "$")


def config_lines(command: list[str]) -> list[str]:
    """The lines a node's script writes to its config file (the printf's arguments)."""
    return re.findall(r'^\s*"([^"]+)" (?:\\$|>)', script(command), re.M)


# -- the profile, read --------------------------------------------------------------------------


def test_the_profile_adds_a_replica_and_three_sentinels_and_leaves_the_rest_alone() -> None:
    spec = services()
    profiled = {name for name, service in spec.items() if "profiles" in service}
    assert profiled == PROFILE_SERVICES
    assert all(spec[name]["profiles"] == ["sentinel"] for name in profiled)
    # Without the profile nothing changes: one Redis, the workers and dashboard on it.
    assert spec["worker"]["environment"]["TOOLPOOL_REDIS_URL"] == "redis://redis:6379/0"
    assert spec["dashboard"]["environment"]["TOOLPOOL_REDIS_URL"] == "redis://redis:6379/0"
    for name in PROFILE_SERVICES:
        assert spec[name]["image"] == spec["redis"]["image"]
        assert "ports" not in spec[name]  # reached inside compose's network only
        assert any(volume.endswith(":/data") for volume in spec[name]["volumes"])
    volumes = {
        volume.split(":")[0] for name in PROFILE_SERVICES for volume in spec[name]["volumes"]
    }
    assert len(volumes) == len(PROFILE_SERVICES)  # a volume each: a node's config is its own
    assert volumes <= set(load("docker-compose.yml")["volumes"])


def test_each_sentinel_watches_the_primary_with_quorum_2_and_5_s_down_after() -> None:
    spec = services()
    for name in SENTINELS:
        sentinel = spec[name]
        env = sentinel["environment"]
        assert (env["ANNOUNCE"], env["PORT"]) == (name, "26379")
        assert (env["PRIMARY_HOST"], env["PRIMARY_PORT"]) == ("redis", "6379")
        lines = config_lines(sentinel["command"])
        assert f"sentinel monitor {SERVICE} $PRIMARY_HOST $PRIMARY_PORT 2" in lines
        assert f"sentinel down-after-milliseconds {SERVICE} 5000" in lines
        assert "sentinel resolve-hostnames yes" in lines  # "redis" is a name, not an address
        assert sentinel["depends_on"]["redis"] == {"condition": "service_healthy"}
        assert sentinel["healthcheck"]["test"] == ["CMD", "redis-cli", "-p", "26379", "ping"]
    replica = spec["redis-replica"]
    assert "replicaof $PRIMARY_HOST $PRIMARY_PORT" in config_lines(replica["command"])
    assert replica["environment"]["PRIMARY_HOST"] == "redis"


def test_with_the_override_the_pool_follows_the_primary_and_waits_for_a_replica() -> None:
    changed = overrides()
    assert set(changed) == {"redis", "worker", "dashboard"}
    for name in ("worker", "dashboard"):
        env = changed[name]["environment"]
        assert env["TOOLPOOL_REDIS_URL"] == SENTINEL_URL
        assert env["TOOLPOOL_REDIS_REPLICAS"] == "1"
        assert set(changed[name]["depends_on"]) <= set(SENTINELS)
    assert set(changed["worker"]["depends_on"]) == set(SENTINELS)
    # Both nodes refuse writes that no replica has heard of within 10 s, primary or promoted.
    for command in (changed["redis"]["command"], services()["redis-replica"]["command"]):
        lines = config_lines(command)
        assert {"min-replicas-to-write 1", "min-replicas-max-lag 10", "appendonly yes"} <= set(
            lines
        )


def test_the_pools_sentinel_url_names_the_three_sentinels_and_the_service() -> None:
    from executor._connect import RedisSettings

    if "sentinels" not in {f.name for f in fields(RedisSettings)}:
        pytest.skip("this toolpool reads no Sentinel URLs yet")
    parsed = RedisSettings.from_url(overrides()["worker"]["environment"]["TOOLPOOL_REDIS_URL"])
    read = {f.name: getattr(parsed, f.name) for f in fields(parsed)}
    assert read["sentinels"] == tuple((name, 26379) for name in SENTINELS)
    assert (read["service"], read["db"]) == (SERVICE, 0)


# -- the profile, run ---------------------------------------------------------------------------


def run_node(
    stack: ExitStack, service: dict[str, Any], folder: Path, bin_dir: Path, **env: str
) -> None:
    """Run ``service``'s command line in ``folder`` (its /data) with its variables, ``env``
    over them, and ``--bind 127.0.0.1`` after it; stopped by its pid on the way out."""
    folder.mkdir()
    variables = {**{k: str(v) for k, v in service["environment"].items()}, **env}
    process = subprocess.Popen(
        [
            *service["command"][:2],
            script(service["command"]),
            *service["command"][3:],
            "--bind",
            "127.0.0.1",
            "--logfile",
            str(folder / "redis.log"),
        ],
        cwd=folder,
        env={**os.environ, **variables, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    stack.callback(_stop, process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=PATIENCE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=PATIENCE_S)


def client(stack: ExitStack, port: int) -> redis.Redis:
    """A test client of one node; closed on the way out."""
    made = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, decode_responses=True)
    stack.callback(made.close)
    return made


def master_state(sentinel: redis.Redis) -> dict[str, Any]:
    """What ``sentinel`` says of the service's primary (SENTINEL MASTER)."""
    state = sentinel.sentinel_master(SERVICE)
    assert isinstance(state, dict)
    return state


def answers(connection: redis.Redis) -> bool:
    try:
        return bool(connection.ping())
    except redis.ConnectionError:
        return False


@pytest.mark.proof  # five redis-server processes
def test_the_profiles_command_lines_give_sentinels_that_report_primary_and_replica(
    tmp_path: Path,
) -> None:
    binary = find_redis_server()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The image's entrypoint, minus the change of user it makes as root; and its redis-server.
    entrypoint = bin_dir / "docker-entrypoint.sh"
    entrypoint.write_text('#!/bin/sh\nexec "$@"\n')
    entrypoint.chmod(0o755)
    if shutil.which("redis-server") is None:
        (bin_dir / "redis-server").symlink_to(binary)
    spec, changed = services(), overrides()
    primary_port, replica_port = free_port(), free_port()
    sentinel_ports = [free_port() for _ in SENTINELS]
    loopback = "127.0.0.1"
    with ExitStack() as stack:
        primary_service = {**spec["redis"], **changed["redis"]}
        run_node(
            stack,
            primary_service,
            tmp_path / "redis",
            bin_dir,
            PORT=str(primary_port),
            ANNOUNCE=loopback,
        )
        primary = client(stack, primary_port)
        wait_for(lambda: answers(primary), "the primary to answer")
        run_node(
            stack,
            spec["redis-replica"],
            tmp_path / "redis-replica",
            bin_dir,
            PORT=str(replica_port),
            PRIMARY_HOST=loopback,
            PRIMARY_PORT=str(primary_port),
            ANNOUNCE=loopback,
        )
        wait_for(
            lambda: (
                primary.info("replication").get("connected_slaves") == 1
                and primary.info("replication")["slave0"]["state"] == "online"
            ),
            "the replica to sync",
            timeout=60,
        )
        sentinels = []
        for name, port in zip(SENTINELS, sentinel_ports, strict=True):
            run_node(
                stack,
                spec[name],
                tmp_path / name,
                bin_dir,
                PORT=str(port),
                PRIMARY_HOST=loopback,
                PRIMARY_PORT=str(primary_port),
                ANNOUNCE=loopback,
            )
            sentinels.append(client(stack, port))

        def all_see_everything() -> bool:
            for sentinel in sentinels:
                try:
                    master = master_state(sentinel)
                    replicas = sentinel.sentinel_slaves(SERVICE)
                except redis.ConnectionError:
                    return False
                if master["num-other-sentinels"] != 2 or len(replicas) != 1:
                    return False
            return True

        wait_for(all_see_everything, "each Sentinel to know the replica and the others", timeout=90)
        for sentinel in sentinels:
            master = master_state(sentinel)
            assert (master["ip"], master["port"]) == (loopback, primary_port)
            assert master["is_master"]
            assert not master["is_sdown"]
            assert (master["quorum"], master["down-after-milliseconds"]) == (2, 5000)
            (replica,) = sentinel.sentinel_slaves(SERVICE)
            assert (replica["ip"], replica["port"]) == (loopback, replica_port)
            assert replica["is_slave"]
            assert replica["master-link-status"] == "ok"
            # redis-py's sentinel_ckquorum wants a bare "OK"; the reply is "OK 3 usable ...".
            quorum = sentinel.execute_command("SENTINEL", "CKQUORUM", SERVICE)  # type: ignore[no-untyped-call]
            assert str(quorum).startswith("OK 3 usable Sentinels"), quorum
        assert primary.config_get("min-replicas-*") == {
            "min-replicas-to-write": "1",
            "min-replicas-max-lag": "10",
        }
        # With the replica there the primary takes writes, and the replica acknowledges them.
        primary.set("compose-probe", "1")
        assert primary.wait(1, 10_000) == 1
        # The configs were written once, where a restart finds them again.
        assert all((tmp_path / name / "sentinel.conf").is_file() for name in SENTINELS)
        assert (tmp_path / "redis-replica" / "redis.conf").is_file()
