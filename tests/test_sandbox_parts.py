"""The parts of bash's confinement, one at a time: bubblewrap's command line and what it hides,
finding cgroups from mountinfo, a call's cgroup (on fake trees, then on this machine's), and
the words for a limit reached or a sandbox missing.

Fast: no worker processes, no Redis. The real sandbox and the real cgroups are tried where
this machine allows them; elsewhere those tests skip and say why.
"""

from __future__ import annotations

import errno
import itertools
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from executor import ToolError
from tests.support.sandbox import require_sandbox
from tests.support.waiting import gone, wait_for
from workers.tools import _confine
from workers.tools._cgroup import CallCgroup, Cgroups, Limits, _Place, discover, find_cgroups
from workers.tools._confine import Confinement, describe
from workers.tools._sandbox import Availability, SandboxSpec, bwrap_argv, hidden_paths, probe
from workers.tools._shell_settings import BashSettings

BWRAP = "/usr/bin/bwrap"
MIB = 1024 * 1024


# --- bwrap_argv: the order of the mounts ---------------------------------------------------


@dataclass(frozen=True)
class Tree:
    """A small tree to hide parts of: a workspace inside a hidden folder, with a sibling,
    a folder hidden inside the workspace, and a hidden file."""

    root: Path
    home: Path  # hidden, an ancestor of the workspace
    workspace: Path
    inner: Path  # hidden, inside the workspace
    sibling: Path  # inside the hidden home, next to the workspace
    secret: Path  # a hidden file

    def spec(self, **changes: Any) -> SandboxSpec:
        hidden = (self.home, self.inner, self.secret)
        return SandboxSpec(self.workspace, hidden, **changes)


def _make_tree(root: Path) -> Tree:
    home = root / "home"
    workspace = home / "ws"
    inner = workspace / "inner"
    sibling = home / "other"
    for folder in (inner, sibling):
        folder.mkdir(parents=True)
    (workspace / "kept.txt").write_text("kept\n")
    (inner / "secret.txt").write_text("inner secret\n")
    (sibling / "note.txt").write_text("sibling note\n")
    secret = root / "token"
    secret.write_text("s3cret\n")
    return Tree(root, home, workspace, inner, sibling, secret)


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A folder outside /tmp. A path inside the private /tmp gets no mount of its own (the
    tmpfs already hides it), so a tree built in /tmp would not show the hidden paths' mounts;
    and in the real sandbox the private /tmp could be what hides things."""
    base = Path("/var/tmp")
    if not os.access(base, os.W_OK):
        pytest.skip(f"no writable folder outside /tmp to build the tree in ({base})")
    folder = Path(tempfile.mkdtemp(prefix="toolpool-sandbox-test-", dir=base))
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", "--", str(folder)], check=False)


@pytest.fixture
def tree(outside_tmp: Path) -> Tree:
    return _make_tree(outside_tmp)


def _at(argv: list[str], *words: str) -> int:
    """Where ``words`` stand together in ``argv``; fails the test where they do not."""
    for index in range(len(argv) - len(words) + 1):
        if tuple(argv[index : index + len(words)]) == words:
            return index
    raise AssertionError(f"{' '.join(words)!r} is not in {argv}")


def _pairs(argv: list[str]) -> list[tuple[str, str]]:
    return list(itertools.pairwise(argv))


def _mount_positions(argv: list[str]) -> list[int]:
    return [i for i, word in enumerate(argv) if word in ("--bind", "--ro-bind", "--tmpfs")]


def test_root_is_bound_read_only_before_any_other_mount(tree: Tree) -> None:
    argv = bwrap_argv(BWRAP, tree.spec(), tree.workspace)
    assert argv[:4] == [BWRAP, "--ro-bind", "/", "/"]
    assert min(_mount_positions(argv)) == 1


def test_private_tmp_is_a_tmpfs_capped_at_tmp_bytes(tree: Tree) -> None:
    argv = bwrap_argv(BWRAP, tree.spec(tmp_bytes=3 * MIB), tree.workspace)
    _at(argv, "--size", str(3 * MIB), "--tmpfs", "/tmp")


def test_private_tmp_has_no_size_option_without_a_cap(tree: Tree) -> None:
    argv = bwrap_argv(BWRAP, tree.spec(tmp_bytes=0), tree.workspace)
    _at(argv, "--tmpfs", "/tmp")
    assert "--size" not in argv


def test_workspace_under_tmp_is_bound_after_the_private_tmp() -> None:
    # Otherwise the private /tmp would cover a workspace that lives in the host's /tmp.
    workspace = Path("/tmp/pool/ws")
    argv = bwrap_argv(BWRAP, SandboxSpec(workspace, ()), workspace)
    assert _at(argv, "--tmpfs", "/tmp") < _at(argv, "--bind", str(workspace), str(workspace))


def test_hidden_ancestor_of_the_workspace_is_mounted_before_it(tree: Tree) -> None:
    # The workspace bind lands on top of the hidden folder's tmpfs: it stays visible.
    argv = bwrap_argv(BWRAP, tree.spec(), tree.workspace)
    ws = str(tree.workspace)
    assert _at(argv, "--tmpfs", str(tree.home)) < _at(argv, "--bind", ws, ws)


def test_hidden_folder_inside_the_workspace_is_mounted_after_it(tree: Tree) -> None:
    # The tmpfs lands on top of the workspace bind: the inner folder stays hidden.
    argv = bwrap_argv(BWRAP, tree.spec(), tree.workspace)
    ws = str(tree.workspace)
    assert _at(argv, "--bind", ws, ws) < _at(argv, "--tmpfs", str(tree.inner))


def test_hidden_file_is_replaced_by_dev_null(tree: Tree) -> None:
    argv = bwrap_argv(BWRAP, tree.spec(), tree.workspace)
    _at(argv, "--ro-bind", "/dev/null", str(tree.secret))
    assert ("--tmpfs", str(tree.secret)) not in _pairs(argv)


def test_hidden_folders_are_made_read_only_after_every_mount(tree: Tree) -> None:
    argv = bwrap_argv(BWRAP, tree.spec(), tree.workspace)
    last_mount = max(_mount_positions(argv))
    for folder in (tree.home, tree.inner):
        assert _at(argv, "--remount-ro", str(folder)) > last_mount
    assert ("--remount-ro", str(tree.secret)) not in _pairs(argv)


def test_read_only_file_in_a_hidden_folder_is_bound_after_the_folder(tree: Tree) -> None:
    rc = tree.home / ".bashrc"
    rc.write_text("# start-up\n")
    argv = bwrap_argv(BWRAP, tree.spec(read_only_files=(rc,)), tree.workspace)
    assert _at(argv, "--tmpfs", str(tree.home)) < _at(argv, "--ro-bind", str(rc), str(rc))


@pytest.mark.parametrize("outer_first", [True, False])
def test_hidden_path_inside_another_hidden_one_gets_no_mount_of_its_own(
    tree: Tree, outer_first: bool
) -> None:
    # The outer folder's tmpfs already hides it; each mount costs time on every call.
    note = tree.sibling / "note.txt"
    inside = (tree.sibling, note)
    spec = SandboxSpec(
        tree.workspace, (tree.home, *inside) if outer_first else (*inside, tree.home)
    )
    argv = bwrap_argv(BWRAP, spec, tree.workspace)
    _at(argv, "--tmpfs", str(tree.home))
    _at(argv, "--remount-ro", str(tree.home))
    assert str(tree.sibling) not in argv
    assert str(note) not in argv


def test_hidden_paths_in_a_workspace_inside_a_hidden_folder_get_their_mounts(tree: Tree) -> None:
    # The workspace bind shows the hidden folder's content again, so what is hidden inside
    # the workspace needs its own mount, on top of the bind.
    env = tree.workspace / ".env"
    env.write_text("KEY=1\n")
    spec = SandboxSpec(tree.workspace, (tree.home, tree.inner, env))
    argv = bwrap_argv(BWRAP, spec, tree.workspace)
    ws = str(tree.workspace)
    bind = _at(argv, "--bind", ws, ws)
    assert _at(argv, "--tmpfs", str(tree.home)) < bind < _at(argv, "--tmpfs", str(tree.inner))
    assert bind < _at(argv, "--ro-bind", "/dev/null", str(env))
    _at(argv, "--remount-ro", str(tree.inner))


def test_tmp_and_paths_under_it_get_no_mount_of_their_own(outside_tmp: Path) -> None:
    # The private /tmp hides the host's /tmp and all in it; a second tmpfs or a read-only
    # remount of /tmp would also take the command's writable /tmp away.
    workspace = outside_tmp / "ws"
    workspace.mkdir()
    pool, netrc = Path("/tmp/toolpool-pool"), Path("/tmp/toolpool-x/.netrc")
    spec = SandboxSpec(workspace, (Path("/tmp"), pool, netrc), tmp_bytes=MIB)
    argv = bwrap_argv(BWRAP, spec, workspace)
    _at(argv, "--size", str(MIB), "--tmpfs", "/tmp")
    assert argv.count("/tmp") == 1
    assert str(pool) not in argv
    assert str(netrc) not in argv


def test_hidden_path_in_a_workspace_under_tmp_gets_its_mount() -> None:
    # The workspace bind shows the host's folder on top of the private /tmp, what is hidden
    # in it included.
    workspace = Path("/tmp/pool/ws")
    secret = workspace / ".git-credentials"
    argv = bwrap_argv(BWRAP, SandboxSpec(workspace, (Path("/tmp/pool"), secret)), workspace)
    ws = str(workspace)
    assert _at(argv, "--bind", ws, ws) < _at(argv, "--ro-bind", "/dev/null", str(secret))
    assert "/tmp/pool" not in argv


def test_network_off_unshares_the_network(tree: Tree) -> None:
    assert "--unshare-net" in bwrap_argv(BWRAP, tree.spec(network=False), tree.workspace)


def test_network_on_keeps_the_network(tree: Tree) -> None:
    assert "--unshare-net" not in bwrap_argv(BWRAP, tree.spec(network=True), tree.workspace)


def test_command_has_no_capabilities_dies_with_the_worker_and_starts_in_cwd(
    tree: Tree,
) -> None:
    argv = bwrap_argv(BWRAP, tree.spec(), tree.workspace / "sub")
    _at(argv, "--cap-drop", "ALL")
    assert "--die-with-parent" in argv
    assert "--unshare-pid" in argv
    _at(argv, "--chdir", str(tree.workspace / "sub"))
    assert argv[-1] == "--"


# --- hidden_paths ---------------------------------------------------------------------------


def test_tilde_is_the_given_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    found = hidden_paths("~ ~/.ssh", tmp_path / "ws", home=home)
    assert found == (home.resolve(), (home / ".ssh").resolve())


def test_missing_paths_are_dropped(tmp_path: Path) -> None:
    there = tmp_path / "there"
    there.mkdir()
    names = f"{tmp_path / 'absent'} ~/.aws {there}"
    found = hidden_paths(names, tmp_path / "ws", home=tmp_path / "no-home")
    assert found == (there.resolve(),)


def test_a_folder_named_twice_is_hidden_once(tmp_path: Path) -> None:
    folder = tmp_path / "creds"
    folder.mkdir()
    link = tmp_path / "link"
    link.symlink_to(folder)
    found = hidden_paths(f"{folder} {link}", tmp_path / "ws", also=[link], home=tmp_path)
    assert found == (folder.resolve(),)


def test_the_workspace_itself_is_never_hidden(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    link = tmp_path / "ws-link"
    link.symlink_to(workspace)
    found = hidden_paths(f"{workspace} {link}", workspace, also=[workspace], home=tmp_path)
    assert found == ()


def test_root_is_never_hidden(tmp_path: Path) -> None:
    assert hidden_paths("/ /.", tmp_path / "ws", home=tmp_path) == ()


def test_other_places_are_hidden_and_an_unset_one_is_skipped(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    pool.mkdir()
    found = hidden_paths("", tmp_path / "ws", also=[pool, None], home=tmp_path)
    assert found == (pool.resolve(),)


# --- the real sandbox -------------------------------------------------------------------------


@pytest.fixture
def real_tree(outside_tmp: Path) -> Tree:
    require_sandbox()
    return _make_tree(outside_tmp)


def _sandboxed(spec: SandboxSpec, cwd: Path, script: str) -> subprocess.CompletedProcess[str]:
    found = probe(spec.network)
    assert found.bwrap is not None, found.reason
    return subprocess.run(
        [*bwrap_argv(found.bwrap, spec, cwd), "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_sandbox_workspace_inside_a_hidden_folder_is_writable(real_tree: Tree) -> None:
    done = _sandboxed(real_tree.spec(), real_tree.workspace, "cat kept.txt; echo new > new.txt")
    assert (done.returncode, done.stdout, done.stderr) == (0, "kept\n", "")
    assert (real_tree.workspace / "new.txt").read_text() == "new\n"


def test_sandbox_sibling_of_the_workspace_is_invisible(real_tree: Tree) -> None:
    done = _sandboxed(real_tree.spec(), real_tree.workspace, "ls -A ..; cat ../other/note.txt")
    assert done.stdout == "ws\n"
    assert "sibling note" not in done.stdout + done.stderr
    assert done.returncode != 0


def test_sandbox_file_in_a_hidden_folders_subfolder_is_invisible(real_tree: Tree) -> None:
    # The subfolder and the file are hidden too, but get no mount of their own: the hidden
    # home's tmpfs covers them.
    note = real_tree.sibling / "note.txt"
    spec = SandboxSpec(real_tree.workspace, (real_tree.home, real_tree.sibling, note))
    argv = bwrap_argv(BWRAP, spec, real_tree.workspace)
    assert str(real_tree.sibling) not in argv
    assert str(note) not in argv
    done = _sandboxed(spec, real_tree.workspace, f"cat {note}")
    assert done.returncode != 0
    assert "No such file or directory" in done.stderr
    assert "sibling note" not in done.stdout + done.stderr
    made = _sandboxed(spec, real_tree.workspace, f"mkdir -p {real_tree.sibling}")
    assert made.returncode != 0
    assert "Read-only file system" in made.stderr
    assert note.read_text() == "sibling note\n"


def test_sandbox_hidden_path_under_tmp_is_invisible_without_a_mount(real_tree: Tree) -> None:
    host_fd, host_name = tempfile.mkstemp(prefix="toolpool-hidden-", dir="/tmp")
    os.close(host_fd)
    try:
        Path(host_name).write_text("host secret\n")
        spec = SandboxSpec(real_tree.workspace, (Path(host_name),), tmp_bytes=MIB)
        assert host_name not in bwrap_argv(BWRAP, spec, real_tree.workspace)
        done = _sandboxed(spec, real_tree.workspace, f"cat {host_name}")
        assert done.returncode != 0
        assert "No such file or directory" in done.stderr
        assert "host secret" not in done.stdout + done.stderr
    finally:
        Path(host_name).unlink()


def test_sandbox_folder_hidden_inside_the_workspace_is_empty_and_read_only(
    real_tree: Tree,
) -> None:
    listed = _sandboxed(real_tree.spec(), real_tree.workspace, "ls -A inner")
    assert (listed.returncode, listed.stdout) == (0, "")
    written = _sandboxed(real_tree.spec(), real_tree.workspace, "echo x > inner/new.txt")
    assert written.returncode != 0
    assert "Read-only file system" in written.stderr
    assert sorted(p.name for p in real_tree.inner.iterdir()) == ["secret.txt"]


def test_sandbox_hidden_file_cannot_be_read_or_written(real_tree: Tree) -> None:
    # bwrap mounts its binds nodev, so the /dev/null in the file's place cannot even be
    # opened: reading fails (Permission denied) rather than reading as empty.
    read = _sandboxed(real_tree.spec(), real_tree.workspace, f"cat {real_tree.secret}")
    assert read.returncode != 0
    assert "s3cret" not in read.stdout + read.stderr
    written = _sandboxed(real_tree.spec(), real_tree.workspace, f"echo x > {real_tree.secret}")
    assert written.returncode != 0
    assert real_tree.secret.read_text() == "s3cret\n"


def test_sandbox_tmp_is_private(real_tree: Tree) -> None:
    host_fd, host_name = tempfile.mkstemp(prefix="toolpool-host-", dir="/tmp")
    os.close(host_fd)
    inside = Path("/tmp") / f"toolpool-inside-{uuid.uuid4().hex}"
    try:
        done = _sandboxed(
            real_tree.spec(), real_tree.workspace, f"test ! -e {host_name} && echo x > {inside}"
        )
        assert (done.returncode, done.stderr) == (0, "")
        assert not inside.exists()
    finally:
        Path(host_name).unlink()
        inside.unlink(missing_ok=True)


def test_sandbox_tmp_stays_writable_when_tmp_itself_is_hidden(real_tree: Tree) -> None:
    # A pool workspace or sessions root of /tmp puts /tmp among the hidden paths; the
    # command must still get its private, writable /tmp (and its home in it).
    spec = SandboxSpec(real_tree.workspace, (Path("/tmp"),), tmp_bytes=MIB)
    done = _sandboxed(spec, real_tree.workspace, "echo x > /tmp/x && cat /tmp/x")
    assert (done.returncode, done.stdout, done.stderr) == (0, "x\n", "")


def test_sandbox_tmp_is_capped_at_tmp_bytes(real_tree: Tree) -> None:
    spec = real_tree.spec(tmp_bytes=1 * MIB)
    done = _sandboxed(spec, real_tree.workspace, "head -c 2097152 /dev/zero > /tmp/big")
    assert done.returncode != 0
    assert "No space left on device" in done.stderr


def test_sandbox_without_network_has_only_loopback(real_tree: Tree) -> None:
    # /proc is the sandbox's own, so /proc/net shows the sandbox's network namespace.
    done = _sandboxed(real_tree.spec(), real_tree.workspace, "tail -n +3 /proc/net/dev")
    interfaces = [line.split(":")[0].strip() for line in done.stdout.splitlines()]
    assert (done.returncode, interfaces) == (0, ["lo"])


# --- discover: which cgroups this worker can use -------------------------------------------

# /proc/self/cgroup of a worker on this kind of machine (v1 controllers, an unused cgroup2).
OWN_HYBRID = """\
9:name=systemd:/
8:pids:/
7:blkio:/
6:freezer:/
5:devices:/
4:memory:/process_api/abc
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
"""


def _v1(number: int, point: Path, options: str, root: str = "/") -> str:
    return f"{number} 31 0:{number} {root} {point} rw,relatime - cgroup cgroup rw,{options}"


def _v2(number: int, point: Path, root: str = "/") -> str:
    return (
        f"{number} 23 0:{number} {root} {point} rw,nosuid,nodev,noexec,relatime shared:4 - "
        "cgroup2 cgroup2 rw,nsdelegate"
    )


def _folders(*folders: Path) -> None:
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)


def _mountinfo_like_this_machine(top: Path, unified: bool = True) -> str:
    """Mount lines as this machine has them, the cgroup2 one only if ``unified``."""
    _folders(*(top / name for name in ("cpu", "cpuacct", "pids", "unified")))
    _folders(top / "memory" / "process_api" / "abc")
    (top / "unified" / "cgroup.subtree_control").write_text("")
    lines = [
        "25 1 253:0 / / rw,relatime - ext4 /dev/vda rw",
        f"31 23 0:28 / {top} rw,relatime - tmpfs tmpfs rw,mode=755",
        _v1(32, top / "cpu", "cpu"),
        _v1(33, top / "cpuacct", "cpuacct"),
        _v1(35, top / "memory", "memory"),
        _v1(39, top / "pids", "pids"),
        _v1(40, top / "systemd", "name=systemd"),
    ]
    return "\n".join([*lines, _v2(41, top / "unified")] if unified else lines)


def test_discover_v1_controllers(tmp_path: Path) -> None:
    mountinfo = _mountinfo_like_this_machine(tmp_path, unified=False)
    found = discover(mountinfo, OWN_HYBRID.replace("0::/\n", ""))
    assert found == Cgroups(
        _Place(tmp_path / "pids", 1),
        _Place(tmp_path / "memory" / "process_api" / "abc", 1),
        _Place(tmp_path / "cpuacct", 1),
    )


def test_discover_hybrid_prefers_v1_and_leaves_the_unused_cgroup2_alone(
    tmp_path: Path,
) -> None:
    found = discover(_mountinfo_like_this_machine(tmp_path), OWN_HYBRID)
    assert (found.pids, found.memory, found.cpu) == (
        _Place(tmp_path / "pids", 1),
        _Place(tmp_path / "memory" / "process_api" / "abc", 1),
        _Place(tmp_path / "cpuacct", 1),
    )
    assert found.missing == ()
    assert (tmp_path / "unified" / "cgroup.subtree_control").read_text() == ""


def test_discover_hybrid_takes_a_controller_from_cgroup2_when_v1_lacks_it(
    tmp_path: Path,
) -> None:
    _folders(tmp_path / "memory", tmp_path / "cpuacct", tmp_path / "unified" / "w")
    (tmp_path / "unified" / "w" / "cgroup.subtree_control").write_text("pids\n")
    mountinfo = "\n".join(
        [
            _v1(33, tmp_path / "cpuacct", "cpuacct"),
            _v1(35, tmp_path / "memory", "memory"),
            _v2(41, tmp_path / "unified"),
        ]
    )
    found = discover(mountinfo, "4:memory:/\n2:cpuacct:/\n0::/w\n")
    assert found.pids == _Place(tmp_path / "unified" / "w", 2)
    assert found.memory == _Place(tmp_path / "memory", 1)
    assert found.cpu == _Place(tmp_path / "cpuacct", 1)


def test_discover_v2_with_controllers_already_enabled(tmp_path: Path) -> None:
    parent = tmp_path / "cg" / "user.slice" / "worker.service"
    _folders(parent)
    (parent / "cgroup.subtree_control").write_text("cpu memory pids\n")
    found = discover(_v2(30, tmp_path / "cg"), "0::/user.slice/worker.service\n")
    assert found == Cgroups(_Place(parent, 2), _Place(parent, 2), _Place(parent, 2))


def test_discover_v2_enables_missing_controllers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tmp_path / "cg" / "worker"
    _folders(parent)
    control = parent / "cgroup.subtree_control"
    control.write_text("")
    written: list[tuple[Path, str]] = []
    write_text = Path.write_text

    def recording(path: Path, data: str, *args: Any, **kwargs: Any) -> int:
        written.append((path, data))
        return write_text(path, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", recording)
    found = discover(_v2(30, tmp_path / "cg"), "0::/worker\n")
    assert (found.pids, found.memory) == (_Place(parent, 2), _Place(parent, 2))
    assert written == [(control, "+pids"), (control, "+memory")]


def test_discover_v2_says_why_a_controller_cannot_be_enabled(tmp_path: Path) -> None:
    parent = tmp_path / "cg" / "worker"
    # A folder where the control file should be: reading or writing it fails.
    _folders(parent / "cgroup.subtree_control")
    found = discover(_v2(30, tmp_path / "cg"), "0::/worker\n")
    assert (found.pids, found.memory) == (None, None)
    assert found.cpu == _Place(parent, 2)
    assert found.missing == (
        f"pids: cannot enable it under {parent} (Is a directory)",
        f"memory: cannot enable it under {parent} (Is a directory)",
    )


def test_discover_without_a_v2_line_in_proc_self_cgroup_ignores_cgroup2(tmp_path: Path) -> None:
    _folders(tmp_path / "cg")
    (tmp_path / "cg" / "cgroup.subtree_control").write_text("cpu memory pids\n")
    found = discover(_v2(30, tmp_path / "cg"), "4:memory:/\n")
    assert (found.pids, found.memory, found.cpu) == (None, None, None)


@pytest.mark.parametrize(
    ("own", "relative"),
    [("/docker/abc", ""), ("/docker/abc/worker", "worker")],
    ids=["at-the-mount-root", "below-it"],
)
def test_discover_container_view_with_a_mount_root_not_slash(
    tmp_path: Path, own: str, relative: str
) -> None:
    # In a container the hierarchy's root is the container's cgroup, mounted as the top.
    point = tmp_path / "memory"
    _folders(point / "worker")
    found = discover(_v1(35, point, "memory", root="/docker/abc"), f"4:memory:{own}\n")
    assert found.memory == _Place(point / relative if relative else point, 1)


def test_discover_skips_a_cgroup_outside_the_mounted_root(tmp_path: Path) -> None:
    _folders(tmp_path / "memory")
    found = discover(_v1(35, tmp_path / "memory", "memory", root="/docker/abc"), "4:memory:/x\n")
    assert found.memory is None
    assert "memory: no cgroup hierarchy offers it" in found.missing


def test_discover_names_a_missing_controller(tmp_path: Path) -> None:
    _folders(tmp_path / "memory", tmp_path / "cpuacct")
    mountinfo = "\n".join(
        [_v1(33, tmp_path / "cpuacct", "cpuacct"), _v1(35, tmp_path / "memory", "memory")]
    )
    found = discover(mountinfo, "8:pids:/\n4:memory:/\n2:cpuacct:/\n")
    assert found.pids is None
    assert found.missing == ("pids: no cgroup hierarchy offers it",)
    assert found.describe("pids") == "no cgroup"
    assert found.describe("memory") == "cgroup v1"


def test_discover_reads_an_escaped_mount_point(tmp_path: Path) -> None:
    point = tmp_path / "cgroup pids"
    _folders(point)
    escaped = str(point).replace(" ", "\\040")
    found = discover(_v1(39, Path(escaped), "pids"), "8:pids:/\n")
    assert found.pids == _Place(point, 1)


def _deny_writes_to(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make ``folder`` unwritable for this worker. chmod would not do as root (root passes
    every permission check), so the access check itself answers no for it."""
    monkeypatch.setattr(os, "access", _denying(os.access, folder))


def _denying(access: Callable[..., bool], folder: Path) -> Callable[..., bool]:
    def check(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        if Path(path) == folder and mode & os.W_OK:
            return False
        return access(path, mode, *args, **kwargs)

    return check


def test_discover_v1_says_which_folder_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tmp_path / "memory" / "process_api" / "abc"
    _folders(parent)
    _deny_writes_to(monkeypatch, parent)
    found = discover(_v1(35, tmp_path / "memory", "memory"), "4:memory:/process_api/abc\n")
    assert found.memory is None
    assert f"memory: {parent} is not writable by this worker" in found.missing


def test_discover_v2_says_which_folder_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tmp_path / "cg" / "worker"
    _folders(parent)
    (parent / "cgroup.subtree_control").write_text("memory pids\n")
    _deny_writes_to(monkeypatch, parent)
    found = discover(_v2(30, tmp_path / "cg"), "0::/worker\n")
    assert (found.pids, found.memory, found.cpu) == (None, None, None)
    assert found.missing == tuple(
        f"{name}: {parent} is not writable by this worker" for name in ("pids", "memory", "cpu")
    )


# --- CallCgroup.needed: which controllers a call uses ---------------------------------------

# needed() only asks whether a controller is there: the folders need not exist.
PIDS, MEMORY, CPU = (_Place(Path("/nowhere") / name, 1) for name in ("pids", "memory", "cpu"))
EVERY = Cgroups(PIDS, MEMORY, CPU)


@pytest.mark.parametrize(
    ("limits", "chosen"),
    [
        (Limits(processes=8), ["pids"]),
        (Limits(memory_bytes=MIB), ["memory"]),
        (Limits(cpu_seconds=0.5), ["cpu"]),
        (Limits(processes=8, memory_bytes=MIB, cpu_seconds=0.5), ["pids", "memory", "cpu"]),
    ],
    ids=["processes", "memory", "cpu", "all"],
)
def test_needed_each_limit_picks_its_controller(limits: Limits, chosen: list[str]) -> None:
    assert CallCgroup.needed(EVERY, limits) == chosen


@pytest.mark.parametrize(
    ("limits", "chosen"),
    [
        (Limits(processes=0, memory_bytes=MIB, cpu_seconds=0.5), ["memory", "cpu"]),
        (Limits(processes=8, memory_bytes=0, cpu_seconds=0.5), ["pids", "cpu"]),
        (Limits(processes=8, memory_bytes=MIB, cpu_seconds=0.0), ["pids", "memory"]),
        (Limits(), []),
    ],
    ids=["processes", "memory", "cpu", "all"],
)
def test_needed_a_limit_of_0_picks_no_controller(limits: Limits, chosen: list[str]) -> None:
    assert CallCgroup.needed(EVERY, limits) == chosen


@pytest.mark.parametrize(
    ("cgroups", "chosen"),
    [
        (EVERY, ["pids"]),
        (Cgroups(None, MEMORY, CPU), ["memory"]),
        (Cgroups(None, None, CPU), ["cpu"]),
        (Cgroups(None, None, None), []),
    ],
    ids=["all-there", "no-pids", "only-cpu", "none-there"],
)
def test_needed_tracking_without_limits_picks_the_first_available(
    cgroups: Cgroups, chosen: list[str]
) -> None:
    # One cgroup is enough to find the command's processes and kill them.
    assert CallCgroup.needed(cgroups, Limits(), track=True) == chosen


def test_needed_tracking_adds_nothing_to_a_limit_that_picks_one() -> None:
    assert CallCgroup.needed(EVERY, Limits(cpu_seconds=0.5), track=True) == ["cpu"]


@pytest.mark.parametrize(
    ("cgroups", "chosen"),
    [
        (Cgroups(None, MEMORY, CPU), ["memory", "cpu"]),
        (Cgroups(PIDS, None, CPU), ["pids", "cpu"]),
        (Cgroups(PIDS, MEMORY, None), ["pids", "memory"]),
        (Cgroups(None, None, None), []),
    ],
    ids=["no-pids", "no-memory", "no-cpu", "none"],
)
@pytest.mark.parametrize("track", [False, True])
def test_needed_a_missing_controller_is_not_picked(
    cgroups: Cgroups, chosen: list[str], track: bool
) -> None:
    limits = Limits(processes=8, memory_bytes=MIB, cpu_seconds=0.5)
    assert CallCgroup.needed(cgroups, limits, track) == chosen


def test_call_cgroup_without_limits_or_tracking_is_none(tmp_path: Path) -> None:
    _folders(tmp_path / "pids")
    cgroups = Cgroups(_Place(tmp_path / "pids", 1), None, None)
    settings = BashSettings(max_processes=0, memory_mb=0, cpu_seconds=0)
    assert _confine._call_cgroup(cgroups, settings, track=False) is None
    assert list((tmp_path / "pids").iterdir()) == []
    call = _confine._call_cgroup(cgroups, settings, track=True)
    assert call is not None
    try:
        [folder] = _call_folders(call)
        assert folder.parent == tmp_path / "pids"
    finally:
        call.remove()


def test_call_cgroup_with_limits_but_no_controller_for_them_is_none() -> None:
    # Only a processes limit, and no pids controller: nothing to make.
    settings = BashSettings(memory_mb=0, cpu_seconds=0)
    assert _confine._call_cgroup(Cgroups(None, MEMORY, CPU), settings, track=False) is None


# --- CallCgroup on fake cgroup trees --------------------------------------------------------

V2_FILES = {
    "cgroup.procs": "",  # never a real pid: kill() would SIGKILL it
    "pids.max": "max\n",
    "pids.events": "max 0\n",
    "memory.max": "max\n",
    "memory.swap.max": "max\n",
    "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
    "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
}
V1_PIDS = {"cgroup.procs": "", "pids.max": "max\n", "pids.events": "max 0\n"}
V1_MEMORY = {
    "cgroup.procs": "",
    "memory.limit_in_bytes": "9223372036854771712\n",
    "memory.memsw.limit_in_bytes": "9223372036854771712\n",
    "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
}
V1_CPU = {"cgroup.procs": "", "cpuacct.usage": "0\n"}


class FakeKernel:
    """cgroupfs in miniature: a folder made under a registered parent holds the files the
    kernel would put there, and no other file can be created in it (cgroupfs refuses that
    with EACCES, as this machine's does)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.files: dict[Path, dict[str, str]] = {}
        mkdir, write_text = Path.mkdir, Path.write_text

        def fake_mkdir(path: Path, *args: Any, **kwargs: Any) -> None:
            mkdir(path, *args, **kwargs)
            for name, text in self.files.get(path.parent, {}).items():
                write_text(path / name, text)

        def fake_write_text(path: Path, data: str, *args: Any, **kwargs: Any) -> int:
            if path.parent.parent in self.files and not path.exists():
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return write_text(path, data, *args, **kwargs)

        monkeypatch.setattr(Path, "mkdir", fake_mkdir)
        monkeypatch.setattr(Path, "write_text", fake_write_text)

    def parent(self, folder: Path, files: dict[str, str]) -> Path:
        """A cgroup folder whose children get ``files``."""
        folder.mkdir(parents=True)
        self.files[folder] = files
        return folder


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    return FakeKernel(monkeypatch)


def _call_folders(cgroup: CallCgroup) -> list[Path]:
    return [Path(path).parent for path in cgroup.procs_files]


def _v2_cgroups(kernel: FakeKernel, top: Path, files: dict[str, str] = V2_FILES) -> Cgroups:
    place = _Place(kernel.parent(top / "cg" / "worker", files), 2)
    return Cgroups(place, place, place)


def _v1_cgroups(kernel: FakeKernel, top: Path, memory: dict[str, str] = V1_MEMORY) -> Cgroups:
    return Cgroups(
        _Place(kernel.parent(top / "pids", V1_PIDS), 1),
        _Place(kernel.parent(top / "memory" / "process_api" / "abc", memory), 1),
        _Place(kernel.parent(top / "cpuacct", V1_CPU), 1),
    )


# Every limit set: every controller gets its folder.
ALL_LIMITS = Limits(processes=8, memory_bytes=MIB, cpu_seconds=30)


def test_v2_call_gets_one_folder_with_its_limits(kernel: FakeKernel, tmp_path: Path) -> None:
    cgroups = _v2_cgroups(kernel, tmp_path)
    call = CallCgroup(cgroups, Limits(processes=64, memory_bytes=256 * MIB))
    [folder] = _call_folders(call)
    assert folder.parent == tmp_path / "cg" / "worker"
    assert folder.name.startswith(f"toolpool-call-{os.getpid()}-")
    assert (folder / "pids.max").read_text() == "64"
    assert (folder / "memory.max").read_text() == str(256 * MIB)
    assert (folder / "memory.swap.max").read_text() == "0"


def test_v2_call_without_swap_accounting_still_gets_its_memory_limit(
    kernel: FakeKernel, tmp_path: Path
) -> None:
    # A kernel that does not account swap makes no memory.swap.max. Creating it is refused
    # (EACCES, not ENOENT), and the call must still be made, with its memory limit.
    files = {name: text for name, text in V2_FILES.items() if name != "memory.swap.max"}
    call = CallCgroup(_v2_cgroups(kernel, tmp_path, files), Limits(memory_bytes=256 * MIB))
    [folder] = _call_folders(call)
    assert (folder / "memory.max").read_text() == str(256 * MIB)
    assert not (folder / "memory.swap.max").exists()


def test_v2_tracking_call_with_no_limits_writes_none(kernel: FakeKernel, tmp_path: Path) -> None:
    call = CallCgroup(_v2_cgroups(kernel, tmp_path), Limits(), track=True)
    [folder] = _call_folders(call)
    assert (folder / "pids.max").read_text() == "max\n"
    assert (folder / "memory.max").read_text() == "max\n"


@pytest.mark.parametrize("version", [1, 2])
def test_call_with_no_limits_and_no_tracking_makes_nothing(
    kernel: FakeKernel, tmp_path: Path, version: int
) -> None:
    cgroups = (_v1_cgroups if version == 1 else _v2_cgroups)(kernel, tmp_path)
    call = CallCgroup(cgroups, Limits())
    assert call.procs_files == []
    assert [list(parent.iterdir()) for parent in kernel.files] == [[] for _ in kernel.files]
    assert (call.processes_refused(), call.memory_kills(), call.cpu_seconds()) == (0, 0, None)


def test_v2_counters_are_read(kernel: FakeKernel, tmp_path: Path) -> None:
    call = CallCgroup(_v2_cgroups(kernel, tmp_path), ALL_LIMITS)
    assert (call.processes_refused(), call.memory_kills(), call.cpu_seconds()) == (0, 0, 0.0)
    [folder] = _call_folders(call)
    # What the kernel counts while the command runs.
    (folder / "pids.events").write_text("max 3\n")
    (folder / "memory.events").write_text("low 0\nhigh 4\nmax 9\noom 2\noom_kill 2\n")
    (folder / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    assert (call.processes_refused(), call.memory_kills(), call.cpu_seconds()) == (3, 2, 2.5)


def test_v1_call_gets_a_folder_per_controller_with_its_limits(
    kernel: FakeKernel, tmp_path: Path
) -> None:
    limits = Limits(processes=64, memory_bytes=MIB, cpu_seconds=30)
    pids, memory, cpu = _call_folders(CallCgroup(_v1_cgroups(kernel, tmp_path), limits))
    assert pids.parent == tmp_path / "pids"
    assert memory.parent == tmp_path / "memory" / "process_api" / "abc"
    assert cpu.parent == tmp_path / "cpuacct"
    assert pids.name == memory.name == cpu.name
    assert (pids / "pids.max").read_text() == "64"
    assert (memory / "memory.limit_in_bytes").read_text() == str(MIB)
    assert (memory / "memory.memsw.limit_in_bytes").read_text() == str(MIB)


def test_v1_call_without_swap_accounting_still_gets_its_memory_limit(
    kernel: FakeKernel, tmp_path: Path
) -> None:
    # v1 without swapaccount=1 (a common default) has no memory.memsw.* files.
    files = {k: v for k, v in V1_MEMORY.items() if k != "memory.memsw.limit_in_bytes"}
    call = CallCgroup(_v1_cgroups(kernel, tmp_path, files), Limits(memory_bytes=MIB))
    [memory] = _call_folders(call)
    assert (memory / "memory.limit_in_bytes").read_text() == str(MIB)
    assert not (memory / "memory.memsw.limit_in_bytes").exists()


@pytest.mark.parametrize(
    ("limits", "made"),
    [
        (Limits(processes=8), ["pids"]),
        (Limits(memory_bytes=MIB), ["memory"]),
        (Limits(cpu_seconds=30), ["cpuacct"]),
        (Limits(processes=8, cpu_seconds=30), ["pids", "cpuacct"]),
    ],
)
def test_v1_call_makes_only_the_folders_its_limits_need(
    kernel: FakeKernel, tmp_path: Path, limits: Limits, made: list[str]
) -> None:
    folders = _call_folders(CallCgroup(_v1_cgroups(kernel, tmp_path), limits))
    # The memory parent is deeper (process_api/abc); its top folder names the controller.
    assert [folder.relative_to(tmp_path).parts[0] for folder in folders] == made


def test_v1_counters_are_read(kernel: FakeKernel, tmp_path: Path) -> None:
    call = CallCgroup(_v1_cgroups(kernel, tmp_path), ALL_LIMITS)
    assert (call.processes_refused(), call.memory_kills(), call.cpu_seconds()) == (0, 0, 0.0)
    pids, memory, cpu = _call_folders(call)
    (pids / "pids.events").write_text("max 4\n")
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    (cpu / "cpuacct.usage").write_text("1500000000\n")
    assert (call.processes_refused(), call.memory_kills(), call.cpu_seconds()) == (4, 1, 1.5)


def test_kill_with_nothing_left_in_the_cgroup_says_so(kernel: FakeKernel, tmp_path: Path) -> None:
    call = CallCgroup(_v1_cgroups(kernel, tmp_path), Limits(), track=True)
    assert len(call.procs_files) == 1
    assert call.pids() == set()
    assert call.kill() is False


def test_remove_of_a_fake_kernel_folder_forgets_it(kernel: FakeKernel, tmp_path: Path) -> None:
    call = CallCgroup(_v2_cgroups(kernel, tmp_path), Limits(processes=8))
    [folder] = _call_folders(call)
    call.remove()
    # cgroupfs removes a cgroup folder with its files in it; on a plain disk rmdir refuses a
    # folder that holds files, so the fake one stays. remove() must not fail on that.
    assert folder.is_dir()
    assert call.procs_files == []
    assert call.processes_refused() == 0


@pytest.mark.parametrize("version", [1, 2])
def test_remove_removes_the_call_folders(tmp_path: Path, version: int) -> None:
    # No fake kernel: the folders are plain ones, so rmdir works as on cgroupfs once the
    # limit files written in them are gone (cgroupfs removes a folder with its files).
    parents = [tmp_path / "a", tmp_path / "b", tmp_path / "c"][: 3 if version == 1 else 1]
    _folders(*parents)
    places = [_Place(parent, version) for parent in parents]
    if version == 2:
        cgroups = Cgroups(places[0], places[0], places[0])
    else:
        cgroups = Cgroups(places[0], places[1], places[2])
    call = CallCgroup(cgroups, ALL_LIMITS)
    folders = _call_folders(call)
    assert len(folders) == len(parents)
    assert all(folder.is_dir() for folder in folders)
    for folder in folders:
        for file in folder.iterdir():
            file.unlink()
    call.remove()
    assert not any(folder.exists() for folder in folders)


def test_a_call_cgroup_that_cannot_be_made_leaves_no_folder(tmp_path: Path) -> None:
    _folders(tmp_path / "pids")
    cgroups = Cgroups(_Place(tmp_path / "pids", 1), _Place(tmp_path / "gone", 1), None)
    with pytest.raises(FileNotFoundError):
        CallCgroup(cgroups, Limits(processes=8, memory_bytes=MIB))
    assert list((tmp_path / "pids").iterdir()) == []


# --- CallCgroup on this machine's cgroups ---------------------------------------------------

# Joins the cgroups (the pid of this shell, which then execs the command) before it runs.
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'

_FORK_LOOP = """
import os, time
children, refused = [], 0
for _ in range(30):
    try:
        pid = os.fork()
    except BlockingIOError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print(len(children), refused)
"""


def _joined(cgroup: CallCgroup, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", "-c", _JOIN, "join", *cgroup.procs_files, "--", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture
def real_call() -> Iterator[Callable[[Limits], CallCgroup]]:
    """Makes calls' cgroups on this machine's cgroups; removes them after the test."""
    found = find_cgroups()
    if found.pids is None or found.memory is None:
        pytest.skip(f"this machine's cgroups are not writable here: {'; '.join(found.missing)}")
    made: list[CallCgroup] = []

    def make(limits: Limits) -> CallCgroup:
        made.append(CallCgroup(found, limits))
        return made[-1]

    yield make
    for call in made:
        call.remove()


def test_real_cgroup_refuses_forks_over_the_processes_limit(
    real_call: Callable[[Limits], CallCgroup], python: str
) -> None:
    call = real_call(Limits(processes=8))
    done = _joined(call, python, "-c", _FORK_LOOP)
    assert done.returncode == 0, done.stderr
    forked, refused = map(int, done.stdout.split())
    assert forked < 8
    assert refused > 0
    assert call.processes_refused() > 0


def test_real_cgroup_kills_an_allocation_over_the_memory_limit(
    real_call: Callable[[Limits], CallCgroup], python: str
) -> None:
    call = real_call(Limits(memory_bytes=64 * MIB))
    done = _joined(call, python, "-c", "data = b'x' * (512 << 20); print('survived')")
    assert "survived" not in done.stdout
    assert done.returncode == -9
    assert call.memory_kills() > 0


def test_real_cgroup_counts_the_cpu_time_of_its_processes(
    real_call: Callable[[Limits], CallCgroup], python: str
) -> None:
    if find_cgroups().cpu is None:
        pytest.skip("this machine has no writable cgroup that counts CPU time")
    call = real_call(Limits(cpu_seconds=60))
    busy = "import time\nwhile time.process_time() < 0.3: pass"
    assert _joined(call, python, "-c", busy).returncode == 0
    used = call.cpu_seconds()
    assert used is not None
    assert used >= 0.25


def test_real_cgroup_kill_ends_a_setsid_process_left_behind(
    real_call: Callable[[Limits], CallCgroup], tmp_path: Path
) -> None:
    call = real_call(Limits(processes=16))
    pidfile = tmp_path / "sleeper.pid"
    # The shell starts a sleeper in a session of its own, then exits: the sleeper is left.
    leave = 'setsid /bin/sh -c \'echo $$ > "$0"; exec sleep 600\' "$1" >/dev/null 2>&1 &'
    done = _joined(call, "/bin/sh", "-c", leave, "sh", str(pidfile))
    assert done.returncode == 0, done.stderr
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), "the sleeper's pid")
    pid = int(pidfile.read_text())
    assert not gone(pid)
    assert pid in call.pids()
    assert call.kill() is True
    wait_for(lambda: gone(pid), f"the sleeper ({pid}) to end")
    assert call.pids() == set()


def test_real_remove_removes_the_call_folders(real_call: Callable[[Limits], CallCgroup]) -> None:
    call = real_call(Limits(processes=8, memory_bytes=64 * MIB))
    folders = _call_folders(call)
    assert folders
    assert all(folder.is_dir() for folder in folders)
    call.remove()
    assert not any(folder.exists() for folder in folders)


# --- Confinement: the words for a limit reached, and for the sandbox at start ---------------


def _confinement(
    settings: BashSettings | None = None, bwrap: str | None = None, cgroup: CallCgroup | None = None
) -> Confinement:
    return Confinement(settings or BashSettings(), Path("/nowhere"), bwrap, [], cgroup=cgroup)


@pytest.mark.parametrize(
    ("returncode", "stderr"),
    [(152, ""), (-24, ""), (1, "bash: line 1:  7 CPU time limit exceeded (core dumped) yes")],
)
def test_limits_reached_cpu_per_process(returncode: int, stderr: str) -> None:
    reached = _confinement().limits_reached(returncode, stderr)
    assert reached == ["the CPU time limit of 300 s per process"]


@pytest.mark.parametrize(
    ("returncode", "stderr"),
    [(153, ""), (-25, ""), (1, "head: error writing 'big': File too large")],
)
def test_limits_reached_file_size(returncode: int, stderr: str) -> None:
    reached = _confinement().limits_reached(returncode, stderr)
    assert reached == ["the file size limit of 1024 MiB per file"]


def test_limits_reached_memory_without_a_cgroup_from_the_error_text() -> None:
    reached = _confinement().limits_reached(1, "Traceback ...\nMemoryError\n")
    assert reached == ["the memory limit of 2048 MiB (an allocation failed)"]


def test_limits_reached_no_memory_phrase_when_memory_is_not_limited() -> None:
    settings = BashSettings(memory_mb=0)
    assert _confinement(settings).limits_reached(1, "MemoryError\n") == []


def test_limits_reached_nothing_for_an_ordinary_failure() -> None:
    assert _confinement().limits_reached(1, "ls: cannot access 'x': No such file\n") == []


def test_limits_reached_cpu_of_all_processes_together() -> None:
    reached = _confinement().limits_reached(-9, "", cpu_total=True)
    assert reached == ["the CPU time limit of 300 s (all its processes together)"]


def test_limits_reached_full_tmp_only_in_the_sandbox() -> None:
    stderr = "cp: error writing '/tmp/x': No space left on device"
    assert _confinement(bwrap=BWRAP).limits_reached(1, stderr) == [
        "the space of the private /tmp (512 MiB), or the workspace's disk is full"
    ]
    assert _confinement().limits_reached(1, stderr) == []


def test_limits_reached_from_the_cgroup_counters(kernel: FakeKernel, tmp_path: Path) -> None:
    settings = BashSettings()
    limits = Limits(settings.max_processes, settings.memory_mb * MIB)
    call = CallCgroup(_v2_cgroups(kernel, tmp_path), limits)
    [folder] = _call_folders(call)
    (folder / "pids.events").write_text("max 5\n")
    (folder / "memory.events").write_text("oom 1\noom_kill 1\n")
    # The kernel's count is the better word: the MemoryError text adds no second phrase.
    reached = _confinement(cgroup=call).limits_reached(-9, "MemoryError\n")
    assert reached == [
        "the memory limit of 2048 MiB (the kernel killed 1 process of the command)",
        "the limit of 512 processes (5 forks refused)",
    ]


NO_BWRAP = Availability(None, reason="bubblewrap (bwrap) is not installed on this worker")


@pytest.fixture
def without_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_confine, "probe", lambda network: NO_BWRAP)
    monkeypatch.setattr(_confine, "find_cgroups", lambda: Cgroups(None, None, None))


@pytest.mark.usefixtures("without_bwrap")
def test_describe_sandbox_off_says_unconfined_without_a_warning() -> None:
    report = describe(BashSettings(sandbox="off"))
    assert report.lines[0] == "bash sandbox: off (commands run unconfined, as the worker's user)"
    assert (report.warning, report.refusal) == ("", "")


@pytest.mark.usefixtures("without_bwrap")
def test_describe_auto_without_bwrap_warns_and_says_how_to_install() -> None:
    report = describe(BashSettings(sandbox="auto"))
    assert report.refusal == ""
    assert "UNCONFINED" in report.warning
    assert NO_BWRAP.reason in report.warning
    assert "apt-get install bubblewrap" in report.warning
    assert "--sandbox required" in report.warning


@pytest.mark.usefixtures("without_bwrap")
def test_describe_required_without_bwrap_refuses_naming_the_reason() -> None:
    report = describe(BashSettings(sandbox="required"))
    assert report.warning == ""
    assert NO_BWRAP.reason in report.refusal
    assert "apt-get install bubblewrap" in report.refusal


@pytest.mark.usefixtures("without_bwrap")
def test_describe_says_which_limits_are_not_enforced_without_cgroups() -> None:
    report = describe(BashSettings(sandbox="off"))
    assert report.lines[1] == (
        "bash limits: processes: not enforced (no pids cgroup); memory 2048 MiB (address "
        "space per process, no memory cgroup); CPU 300 s per process; file size 1024 MiB"
    )


def test_describe_with_bwrap_names_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    found = Availability(BWRAP, version="bubblewrap 0.8.0")
    monkeypatch.setattr(_confine, "probe", lambda network: found)
    monkeypatch.setattr(_confine, "find_cgroups", lambda: Cgroups(None, None, None))
    report = describe(BashSettings(sandbox="required"))
    assert report.lines[0].startswith("bash sandbox: bubblewrap 0.8.0 (")
    assert "no network" in report.lines[0]
    assert (report.warning, report.refusal) == ("", "")


@pytest.mark.usefixtures("without_bwrap")
def test_prepare_required_without_bwrap_runs_nothing_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="nothing ran") as raised:
        Confinement.prepare(BashSettings(sandbox="required"), tmp_path)
    assert NO_BWRAP.reason in str(raised.value)


@pytest.mark.usefixtures("without_bwrap")
def test_prepare_auto_without_bwrap_runs_unsandboxed(tmp_path: Path) -> None:
    with Confinement.prepare(BashSettings(sandbox="auto"), tmp_path) as confinement:
        assert not confinement.sandboxed
        assert confinement.env == {}
