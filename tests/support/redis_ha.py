"""A real Redis primary and replicas under three Sentinels, and the failovers a test injects.

``RedisHA`` starts a primary and ``replicas`` data nodes (default one) ``--replicaof`` it, and
three ``redis-server --sentinel`` processes watching them as service ``toolpool`` (quorum 2),
all on free loopback ports in folders under the test's tmp dir. With two replicas, Sentinel
points the one it did not promote at the new primary during the failover, so the new primary
has a replica at once; with one, the old primary becomes that replica only when Sentinel
demotes it (after a SENTINEL FAILOVER or a SIGSTOP, some 10 s later). A write acknowledged by
only one of two replicas may still be lost: the other may be the one promoted. Its faults
each end with a new primary that answers a write and that every Sentinel reports:

- ``failover()``: ``SENTINEL FAILOVER``; Sentinel demotes the old primary itself.
- ``kill_primary()``: SIGKILL; the old node starts again in its folder, as a replica of the
  new primary, so the next fault has a replica.
- ``stop_primary()``: SIGSTOP past down-after, then SIGCONT; Sentinel demotes the old primary.
- ``lagging_failover()``: every replica replicates through a proxy that stops forwarding while
  writes go on, then the primary is SIGKILLed: a lagging replica is promoted and the
  writes it never saw are lost, as in a real asynchronous failover.

Every fault first waits until the nodes are healthy (``wait_ready``): every replica in
sync-capable shape and seen by every Sentinel, so faults can follow each other. Every wait
has a deadline and raises ``HAError`` naming what did not happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import redis

from tests.support._ha_nodes import (
    HAError,
    Process,
    client,
    data_node,
    replica_args,
    sentinel,
    wait_until,
)
from tests.support.fault.proxy import TcpProxy

__all__ = ["HAError", "RedisHA"]

SERVICE = "toolpool"
# A probe write proves a primary writable; it goes to a database the code under test never uses.
_PROBE_DB = 15
_PROBE_KEY = "redis-ha:probe"


class RedisHA:
    """A primary, one or more replicas and three Sentinels of our own; a context manager.

    ``replica_port`` is the first replica (the only one by default), ``replica_ports`` all."""

    def __init__(
        self,
        folder: Path,
        *,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        patience_s: float = 60.0,
        replicas: int = 1,
    ) -> None:
        if replicas < 1:
            raise ValueError(f"replicas: at least 1, not {replicas}")
        self.replicas = replicas
        self.folder = Path(folder) / "redis-ha"
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.patience_s = patience_s
        self.nodes: dict[int, Process] = {}
        self.sentinels: list[Process] = []
        self.primary_port = 0
        self.replica_port = 0
        self.replica_ports: list[int] = []
        # Wall-clock times (time.time()) of the last fault's injection and of the promotion
        # that ended it, for a run that compares them with its processes' event stamps.
        self.fault_at = 0.0
        self.promoted_at = 0.0
        # Called with the new primary's port at each promotion (a proxy that follows it).
        self.on_promoted: Callable[[int], object] | None = None
        self._probes = 0

    # -- addresses ---------------------------------------------------------------------------

    @property
    def service(self) -> str:
        """The name Sentinel knows the primary by."""
        return SERVICE

    @property
    def sentinel_ports(self) -> list[int]:
        return [s.port for s in self.sentinels]

    def url(self, db: int = 0) -> str:
        """The Sentinel URL clients follow the primary with."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/{db}"

    def raw(self, port: int, db: int = 0) -> redis.Redis:
        """A plain client to one server (a data node or a Sentinel); for tests only."""
        return client(port, db=db)

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> RedisHA:
        """Start the data nodes and the Sentinels; return once they are ready."""
        deadline = self._deadline()
        primary = data_node(self.folder)
        replicas = [data_node(self.folder) for _ in range(self.replicas)]
        for replica in replicas:
            replica.args = replica_args(replica, primary.port)
        for node in (primary, *replicas):
            self.nodes[node.port] = node
            node.launch(deadline)
        self._set_primary(primary.port)
        for _ in range(3):
            watcher = sentinel(
                self.folder,
                SERVICE,
                primary.port,
                down_after_ms=self.down_after_ms,
                failover_timeout_ms=self.failover_timeout_ms,
            )
            self.sentinels.append(watcher)
            watcher.launch(deadline)
        self.wait_ready()
        return self

    def close(self) -> None:
        """End every process the harness started, by pid."""
        for process in [*self.sentinels, *self.nodes.values()]:
            process.kill()

    def __enter__(self) -> RedisHA:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- roles and health --------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the roles from the Sentinels; every Sentinel must name the same primary."""
        reported = set(self._reported_primaries())
        if len(reported) != 1 or None in reported:
            raise HAError(f"the Sentinels disagree on the primary: {sorted(map(str, reported))}")
        (port,) = reported
        assert port is not None
        self._set_primary(port)

    def wait_ready(self) -> None:
        """Wait until the nodes are healthy: one primary that every Sentinel names, every
        replica linked to it (not in a full sync), every Sentinel seeing those replicas up and
        two other Sentinels. After a SENTINEL FAILOVER or a SIGSTOP this includes the
        demotion of the old primary, which Sentinel makes some 10 s later."""
        deadline = self._deadline()
        wait_until("every Sentinel to name one primary", self._agreed, deadline, self.diagnosis)
        wait_until(
            f"{self._replicas_named()} to replicate from {self.primary_port} "
            "and every Sentinel to see them healthy",
            self._healthy,
            deadline,
            self.diagnosis,
        )

    def wait_synced(self) -> None:
        """Wait until every replica has processed everything the primary has written so far."""
        target = int(self._info(self.primary_port)["master_repl_offset"])
        wait_until(
            f"{self._replicas_named()} to reach offset {target}",
            lambda: min(self._replica_offset(port) for port in self.replica_ports) >= target,
            self._deadline(),
            self.diagnosis,
        )

    def diagnosis(self) -> str:
        """The tail of every process's log, for an error message."""
        return "\n".join(p.tail() for p in [*self.nodes.values(), *self.sentinels])

    # -- faults ------------------------------------------------------------------------------

    def failover(self) -> float:
        """``SENTINEL FAILOVER``; the seconds until a new primary is writable and reported."""
        self.wait_ready()
        old = self.primary_port
        started = time.monotonic()
        self.fault_at = time.time()
        wait_until(
            "a Sentinel to accept SENTINEL FAILOVER",
            self._failover_accepted,
            self._deadline(),
            self.diagnosis,
        )
        return self._promoted(old, started)

    def kill_primary(self) -> float:
        """SIGKILL the primary; once Sentinel promoted the replica, start the old node again
        in its folder as a replica of the new one. The seconds until the promotion."""
        self.wait_ready()
        old = self.nodes[self.primary_port]
        started = time.monotonic()
        self.fault_at = time.time()
        old.kill()
        taken = self._promoted(old.port, started)
        self._restart_as_replica(old)
        return taken

    def stop_primary(self, seconds: float | None = None) -> float:
        """SIGSTOP the primary until Sentinel promoted the replica (and at least ``seconds``),
        then SIGCONT: the old primary wakes up believing it leads, until Sentinel demotes it.
        The seconds until the promotion."""
        self.wait_ready()
        old = self.nodes[self.primary_port]
        started = time.monotonic()
        self.fault_at = time.time()
        old.stop()
        try:
            taken = self._promoted(old.port, started)
            if seconds is not None:
                time.sleep(max(0.0, started + seconds - time.monotonic()))
        finally:
            old.resume()
        return taken

    def lagging_failover(
        self, freeze_s: float = 2.0, while_frozen: Callable[[], object] | None = None
    ) -> float:
        """Freeze replication for ``freeze_s`` while writes go on (``while_frozen`` may make
        some), then SIGKILL the primary: a lagging replica is promoted and what it never
        received is lost. The old node comes back as a replica. The seconds until the
        promotion (counted from the kill)."""
        self.wait_ready()
        old = self.nodes[self.primary_port]
        lagging = list(self.replica_ports)
        # Only for the fault: Sentinel points a replica whose primary looks wrong back at the
        # right address (+fix-slave-config), but not sooner than one INFO period (10 s) later.
        # Every replica lags: one that did not would be the one promoted, losing nothing.
        proxies = [TcpProxy("127.0.0.1", old.port).start() for _ in lagging]
        try:
            for port, proxy in zip(lagging, proxies, strict=True):
                self._replicate_through(port, proxy)
            self.wait_synced()
            for proxy in proxies:
                proxy.cut()
            frozen_at = time.monotonic()
            if while_frozen is not None:
                while_frozen()
            wait_until(
                f"the primary on {old.port} to get ahead of the frozen replicas",
                lambda: max(map(self._replica_offset, lagging)) < self._primary_offset(old.port),
                self._deadline(),
                self.diagnosis,
            )
            time.sleep(max(0.0, frozen_at + freeze_s - time.monotonic()))
            started = time.monotonic()
            self.fault_at = time.time()
            old.kill()
            taken = self._promoted(old.port, started)
        finally:
            for proxy in proxies:
                proxy.stop()
        self._restart_as_replica(old)
        return taken

    def _replicate_through(self, port: int, proxy: TcpProxy) -> None:
        self.raw(port).replicaof("127.0.0.1", proxy.port)
        wait_until(
            f"the replica on {port} to replicate through the proxy on {proxy.port}",
            lambda: self._linked(port, proxy.port),
            self._deadline(),
            self.diagnosis,
        )

    # -- internals ---------------------------------------------------------------------------

    def _replicas_named(self) -> str:
        if len(self.replica_ports) == 1:
            return f"the replica on {self.replica_port}"
        return f"the replicas on {', '.join(map(str, self.replica_ports))}"

    def _deadline(self) -> float:
        return time.monotonic() + self.patience_s

    def _set_primary(self, port: int) -> None:
        if port not in self.nodes:
            raise HAError(f"the Sentinels name {port}, which is none of the harness's nodes")
        self.primary_port = port
        self.replica_ports = [p for p in self.nodes if p != port]
        self.replica_port = self.replica_ports[0]

    def _reported_primaries(self) -> list[int | None]:
        reported: list[int | None] = []
        for watcher in self.sentinels:
            with self.raw(watcher.port) as sentinel_client:
                address = sentinel_client.execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE
                )
            reported.append(int(address[1]) if address else None)
        return reported

    def _agreed(self) -> bool:
        reported = set(self._reported_primaries())
        if len(reported) != 1 or None in reported:
            return False
        (port,) = reported
        assert port is not None
        self._set_primary(port)
        return True

    def _healthy(self) -> bool:
        if not self._agreed():
            return False
        if not all(self._linked(port, self.primary_port) for port in self.replica_ports):
            return False
        if self._info(self.primary_port)["role"] != "master":
            return False
        return all(self._sentinel_sees_nodes(watcher.port) for watcher in self.sentinels)

    def _sentinel_sees_nodes(self, port: int) -> bool:
        with self.raw(port) as sentinel_client:
            master = _pairs(sentinel_client.execute_command("SENTINEL", "MASTER", SERVICE))
            replicas = [
                _pairs(entry)
                for entry in sentinel_client.execute_command("SENTINEL", "REPLICAS", SERVICE)
            ]
        if master["flags"] != "master" or int(master["num-other-sentinels"]) < 2:
            return False
        # Not master-link-status: Sentinel reads it by INFO every 10 s while all is well, and
        # every second once the primary looks down, which is when it picks a replica.
        healthy = {int(entry["port"]) for entry in replicas if entry["flags"] == "slave"}
        return set(self.replica_ports) <= healthy

    def _linked(self, replica: int, primary: int) -> bool:
        info = self._info(replica)
        return (
            info["role"] == "slave"
            and int(info["master_port"]) == primary
            and info["master_link_status"] == "up"
            and int(info.get("master_sync_in_progress", 0)) == 0
        )

    def _promoted(self, old: int, started: float) -> float:
        """Wait until every Sentinel names a primary other than ``old`` and it takes a write."""
        wait_until(
            f"the Sentinels to promote a new primary in place of {old}",
            lambda: self._agreed() and self.primary_port != old and self._writable(),
            self._deadline(),
            self.diagnosis,
        )
        self.promoted_at = time.time()
        if self.on_promoted is not None:
            self.on_promoted(self.primary_port)
        return time.monotonic() - started

    def _writable(self) -> bool:
        self._probes += 1
        with self.raw(self.primary_port, db=_PROBE_DB) as probe:
            return bool(probe.set(_PROBE_KEY, self._probes))

    def _failover_accepted(self) -> bool:
        # Sentinel refuses while it sees no good replica yet or a failover is in progress.
        try:
            with self.raw(self.sentinel_ports[0]) as sentinel_client:
                return bool(sentinel_client.execute_command("SENTINEL", "FAILOVER", SERVICE))
        except redis.ResponseError as error:
            if "NOGOODSLAVE" in str(error) or "INPROG" in str(error):
                return False
            raise

    def _restart_as_replica(self, node: Process) -> None:
        node.args = replica_args(node, self.primary_port)
        node.launch(self._deadline())

    def _info(self, port: int) -> dict[str, str]:
        with self.raw(port) as node:
            return {k: str(v) for k, v in node.info("replication").items()}

    def _primary_offset(self, port: int) -> int:
        return int(self._info(port)["master_repl_offset"])

    def _replica_offset(self, port: int) -> int:
        return int(self._info(port).get("slave_repl_offset", -1))


def _pairs(flat: object) -> dict[str, str]:
    """A Sentinel reply as a dict, whether redis-py already paired it or not."""
    if isinstance(flat, dict):
        return {_text(k): _text(v) for k, v in flat.items()}
    assert isinstance(flat, list)
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
