"""Network namespaces for the host proofs: each "host" a namespace of its own, one veth to us.

``isolated_hosts(3)`` makes namespaces ``tp-<pid>-h1`` ... with one veth pair each: the root
end (``tp<pid>h1a``, address ``10.213.<k>.1/30``) stays here, the other end (``tp<pid>h1b``,
``10.213.<k>.2/30``) goes into the namespace, with ``lo``. A namespace has no other link and no
default route, so its traffic reaches only its peer address in the root namespace.
``cut(host)`` sets the root end down (the link is gone both ways; the addresses stay, so a
server bound to them keeps listening) and ``restore(host)`` sets it up again.

Each end knows the other's MAC address for good (a permanent neighbour entry), so a cut drops
packets silently, as a partition beyond the first hop does: without it the kernel would fail
connects at once with "no route to host" after three unanswered ARP probes, a fast failure
that a real partition does not give.

The test skips, saying why, when it cannot make them: not root, no ``ip``, a kernel that
refuses namespaces. Whatever was made is deleted on the way out, even after a failure, and
nothing else is ever touched: only names this process created are deleted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

# Private /30 networks under this /16; a block already on the machine is not used.
_NETWORK = "10.213"
_BLOCKS = 64  # third octets 0..255 in steps of 4, one /30 each
_IP_TIMEOUT_S = 30.0


class NetnsUnavailable(Exception):
    """Namespaces cannot be made here; the message says why (the test skips with it)."""


@dataclass(frozen=True)
class Host:
    """One namespace and the veth pair that links it to the root namespace."""

    name: str  # the host name its workers use ("h1")
    netns: str  # "tp-<pid>-h1"
    outer: str  # the veth end in the root namespace
    inner: str  # the veth end inside the namespace
    outer_address: str  # where the namespace reaches the root namespace (a server binds it)
    inner_address: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


class Hosts:
    """The namespaces of one test: look one up by name, cut its link, restore it."""

    def __init__(self, hosts: list[Host]) -> None:
        self.all = hosts
        self._by_name = {h.name: h for h in hosts}

    def __getitem__(self, name: str) -> Host:
        return self._by_name[name]

    def addresses(self) -> list[str]:
        """The root-side addresses, where a server must listen for the hosts to reach it."""
        return [h.outer_address for h in self.all]

    def cut(self, name: str) -> None:
        """Take ``name``'s link down: nothing passes between it and the root namespace."""
        _ip("link", "set", self[name].outer, "down")

    def restore(self, name: str) -> None:
        """Bring ``name``'s link back up."""
        _ip("link", "set", self[name].outer, "up")

    def is_up(self, name: str) -> bool:
        """Whether ``name``'s root-side link is administratively up."""
        out = _ip("-o", "link", "show", self[name].outer)
        flags = out.split("<", 1)[1].split(">", 1)[0].split(",")
        return "UP" in flags


def _ip(*args: str) -> str:
    """Run ``ip ARGS``; its output, or a ``CalledProcessError`` carrying its stderr."""
    result = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        raise subprocess.CalledProcessError(
            result.returncode, ["ip", *args], result.stdout, result.stderr
        )
    return result.stdout


def _check_possible() -> None:
    if os.geteuid() != 0:
        raise NetnsUnavailable(
            f"network namespaces need root (this test runs as uid {os.geteuid()})"
        )
    if shutil.which("ip") is None:
        raise NetnsUnavailable("the `ip` command (iproute2) is not installed")


def _free_blocks(count: int) -> list[int]:
    """Third octets of ``count`` /30 blocks of 10.213.0.0/16 that no address here is in."""
    used = set()
    for line in _ip("-4", "-o", "addr", "show").splitlines():
        parts = line.split()
        address = parts[parts.index("inet") + 1] if "inet" in parts else ""
        if address.startswith(_NETWORK + "."):
            used.add(int(address.split(".")[2]))
    # Spread by pid, so that two runs at once rarely even try the same block.
    start = os.getpid() % _BLOCKS
    free = [(start + i) % _BLOCKS * 4 for i in range(_BLOCKS)]
    chosen = [octet for octet in free if octet not in used][:count]
    if len(chosen) < count:
        raise NetnsUnavailable(f"no free /30 blocks left in {_NETWORK}.0.0/16")
    return chosen


@contextmanager
def isolated_hosts(names: Sequence[str]) -> Iterator[Hosts]:
    """Namespaces for ``names``, each linked to the root namespace; all deleted afterwards.

    Skips the test (printing why) when namespaces cannot be made here.
    """
    made_netns: list[str] = []
    made_links: list[str] = []
    try:
        try:
            _check_possible()
            hosts = _make(names, made_netns, made_links)
        except (NetnsUnavailable, subprocess.CalledProcessError, OSError) as exc:
            detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else ""
            reason = f"network namespaces are not available here: {exc} {detail}".strip()
            print(f"SKIPPED: {reason}")
            pytest.skip(reason)
        yield hosts
    finally:
        _teardown(made_netns, made_links)


def _make(names: Sequence[str], made_netns: list[str], made_links: list[str]) -> Hosts:
    pid = os.getpid()
    hosts: list[Host] = []
    for name, octet in zip(names, _free_blocks(len(names)), strict=True):
        # An interface name is at most 15 characters: "tp" + pid (<= 7 digits) + name + "a".
        outer, inner = f"tp{pid}{name}a", f"tp{pid}{name}b"
        if len(outer) > 15:
            raise NetnsUnavailable(f"interface name {outer!r} is longer than 15 characters")
        host = Host(
            name=name,
            netns=f"tp-{pid}-{name}",
            outer=outer,
            inner=inner,
            outer_address=f"{_NETWORK}.{octet}.1",
            inner_address=f"{_NETWORK}.{octet}.2",
        )
        _ip("netns", "add", host.netns)
        made_netns.append(host.netns)
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        made_links.append(outer)  # deleting one end deletes the pair
        _ip("link", "set", inner, "netns", host.netns)
        _ip("addr", "add", f"{host.outer_address}/30", "dev", outer)
        _ip("link", "set", outer, "up")
        inside = ["-n", host.netns]
        _ip(*inside, "addr", "add", f"{host.inner_address}/30", "dev", inner)
        _ip(*inside, "link", "set", inner, "up")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(
            "neigh",
            "replace",
            host.inner_address,
            "lladdr",
            _mac(inner, host.netns),
            "dev",
            outer,
            "nud",
            "permanent",
        )
        _ip(
            *inside,
            "neigh",
            "replace",
            host.outer_address,
            "lladdr",
            _mac(outer),
            "dev",
            inner,
            "nud",
            "permanent",
        )
        hosts.append(host)
    return Hosts(hosts)


def _mac(link: str, netns: str | None = None) -> str:
    """The hardware address of ``link`` (in ``netns``, if given)."""
    where = ["-n", netns] if netns else []
    words = _ip(*where, "-o", "link", "show", "dev", link).split()
    return words[words.index("link/ether") + 1]


def _teardown(made_netns: list[str], made_links: list[str]) -> None:
    """Delete what this process made, each on its own, so one failure leaves no other behind."""
    problems: list[str] = []
    for link in made_links:
        try:
            _ip("link", "del", link)
        except subprocess.CalledProcessError as exc:
            # The pair also goes with its namespace; only a link still listed is a leak.
            if _ip_ok("link", "show", link):
                problems.append(f"link {link}: {exc.stderr.strip()}")
    for netns in made_netns:
        try:
            _ip("netns", "del", netns)
        except subprocess.CalledProcessError as exc:
            problems.append(f"netns {netns}: {exc.stderr.strip()}")
    assert not problems, f"could not delete what the test made: {problems}"


def _ip_ok(*args: str) -> bool:
    try:
        _ip(*args)
    except subprocess.CalledProcessError:
        return False
    return True
