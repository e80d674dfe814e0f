"""Limits per sandbox, not per process or per uid: a cgroup each (memory, processes, CPU), sized
tmpfs, a watched disk quota. Sizes stay small (tens of MB) so the suite is fast and the VM safe."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from cluster import sandbox
from cluster.runner import cgroups
from cluster.runner.cgroups import NEEDED
from cluster.runner.watch import allocated_bytes
from cluster.sandbox import Limits
from tests.cluster.helpers import marker, processes_with, python, run, sh
from tests.polling import wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="level 1 is Linux bubblewrap")

MB = 1 << 20
per_sandbox = pytest.mark.skipif(
    not sandbox.limits_mode().per_sandbox, reason="this node has no usable cgroups"
)

# Forks until it cannot, the children wait; writes "full <n>" to argv[2] and then waits too.
FORK_HOLD = """
import os, signal, sys
forks = 0
try:
    for _ in range(int(sys.argv[1])):
        if os.fork() == 0:
            signal.pause()
            os._exit(0)
        forks += 1
except OSError:
    pass
with open(sys.argv[2], "w") as file:
    file.write(f"full {forks}")
signal.pause()
"""

# Two processes (parent and child) each hold argv[1] MB resident for a moment.
TWO_HOLDERS = """
import os, sys, time
child = os.fork()
block = b"x" * (int(sys.argv[1]) << 20)
time.sleep(1)
if child:
    print("child", os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
print("parent done", flush=True)
"""

# Two processes spin for a second of wall clock; prints the CPU seconds they got together.
TWO_SPINNERS = """
import os, time
child = os.fork()
end = time.monotonic() + 1.0
while time.monotonic() < end:
    pass
used = time.process_time()
if child == 0:
    with open("/tmp/child", "w") as file:
        file.write(repr(used))
    os._exit(0)
os.waitpid(child, 0)
print(round(used + float(open("/tmp/child").read()), 2))
"""


def given(workdir: Path, run_id: int | None) -> Path:
    sandbox.give(workdir, run_id)
    return workdir


def own_cgroups() -> list[Path]:
    prefix = f"{os.getpid()}-"
    return [
        path
        for base in cgroups.directories()
        for path in base.iterdir()
        if path.is_dir() and path.name.startswith(prefix)
    ]


# --- The mode ------------------------------------------------------------------------------------


def test_it_says_which_mode_enforces_the_limits() -> None:
    mode = sandbox.limits_mode()

    if os.geteuid() == 0 and os.access("/sys/fs/cgroup/pids", os.W_OK):  # this machine kind
        assert (mode.name, mode.per_sandbox) == ("cgroup-v1", True)
        assert "/sys/fs/cgroup/pids/" in mode.detail
    else:
        assert mode.name in ("cgroup-v2", "rlimits")


@per_sandbox
def test_it_puts_the_sandbox_in_its_cgroup_before_the_command_starts(workdir: Path) -> None:
    tag, stopping = marker(), threading.Event()
    seen: list[str] = []
    sleeper = threading.Thread(
        target=lambda: seen.append(
            run(
                ["sh", "-c", f"cat /proc/self/cgroup; sleep {tag}"], workdir, stopping=stopping
            ).output
        )
    )
    sleeper.start()
    try:
        found = wait_for(  # bwrap, its pid 1, sh, sleep
            lambda: found if len(found := processes_with(tag)) >= 3 else None,
            timeout=10,
            message="the sandbox to start",
        )
        host_views = [Path(f"/proc/{line.split(':')[0]}/cgroup").read_text() for line in found]
    finally:
        stopping.set()
        sleeper.join(10)

    for view in host_views:
        lines = [line for line in view.splitlines() if line.split(":")[1] in NEEDED]
        assert len(lines) == len(NEEDED)
        assert all(f"/agentos/{os.getpid()}-" in line for line in lines), view
    # Inside, its own cgroup is the root of its cgroup namespace: it was in it when bwrap made
    # the namespace, before the command ran.
    assert {line.split(":", 2)[2] for line in seen[0].splitlines()} == {"/"}
    assert own_cgroups() == []  # removed once the sandbox was gone


# --- Processes -----------------------------------------------------------------------------------


@per_sandbox
@pytest.mark.parametrize(("bomber", "other"), [(21, 22), (None, None)], ids=["runs", "shared-uid"])
def test_it_starts_other_sandboxes_while_one_fork_bombs(
    sandbox_base: Path, bomber: int | None, other: int | None
) -> None:
    if os.geteuid() != 0 and bomber is not None:
        pytest.skip("per-run uids need root")
    bomb_dir = given(Path(tempfile.mkdtemp(dir=sandbox_base)), bomber)
    other_dir = given(Path(tempfile.mkdtemp(dir=sandbox_base)), other)
    tag, stopping = marker(), threading.Event()
    limits = Limits(wall_seconds=30, processes=64)
    bomb = threading.Thread(
        target=lambda: run(
            ["/usr/bin/python3", "-c", FORK_HOLD, "10000", "full", tag],
            bomb_dir,
            limits,
            stopping=stopping,
            run_id=bomber,
        )
    )
    bomb.start()
    try:
        wait_for(
            lambda: (bomb_dir / "full").exists(),
            timeout=20,
            message="the bomb to fill its sandbox",
            interval=0.05,
        )
        held = len(processes_with(tag))

        # The same limits as the bomb's: each run gets the node's defaults.
        result = sh("echo ok", other_dir, limits, run_id=other)
    finally:
        stopping.set()
        bomb.join(30)

    assert (bomb_dir / "full").read_text().startswith("full ")
    assert 32 < held <= 64  # the whole sandbox (bwrap's pid 1 included) stays under pids.max
    assert (result.exit_code, result.output) == (0, "ok\n"), result.summary()
    assert result.duration_ms < 5000
    assert processes_with(tag) == []


# --- Memory --------------------------------------------------------------------------------------


@per_sandbox
def test_it_caps_the_memory_of_the_whole_sandbox(workdir: Path) -> None:
    limits = Limits(wall_seconds=20, memory_bytes=160 * MB)

    one = python("block = b'x' * (100 << 20); print('held')", workdir=workdir, limits=limits)
    two = python(TWO_HOLDERS, "100", workdir=workdir, limits=limits)

    assert (one.exit_code, one.output, one.out_of_memory) == (0, "held\n", 0), one.summary()
    assert two.out_of_memory >= 1, two.summary()
    assert "[out of memory: 1 process(es) killed at the sandbox's 160 MB limit]\n" in two.summary()
    assert "child 0\nparent done\n" not in two.output


def test_it_caps_each_process_memory_without_cgroups(workdir: Path, rlimits_only: None) -> None:
    limits = Limits(wall_seconds=20, memory_bytes=128 * MB)

    result = python("b'x' * (256 << 20)", workdir=workdir, limits=limits)

    assert sandbox.limits_mode().name == "rlimits"
    assert result.output.splitlines()[-1] == "MemoryError"


# --- CPU -----------------------------------------------------------------------------------------


@per_sandbox
def test_it_caps_the_cpu_of_the_whole_sandbox(workdir: Path) -> None:
    result = python(TWO_SPINNERS, workdir=workdir, limits=Limits(wall_seconds=20, cpus=0.5))

    assert result.exit_code == 0, result.summary()
    # Two spinners for a second would get up to 2 CPU seconds on two cores; half a core gives 0.5.
    assert 0.2 < float(result.output) < 0.75


# --- tmpfs ---------------------------------------------------------------------------------------


def test_it_sizes_every_writable_tmpfs_and_keeps_dev_read_only(workdir: Path) -> None:
    script = """
for path in /tmp/fill /dev/shm/fill; do
    head -c 16000000 /dev/zero > $path; echo "$path $? $(stat -c %s $path)"; rm $path
done
echo x > /dev/fill; echo "/dev/fill $?"
echo x > /dev/null; echo "/dev/null $?"
echo small > /dev/shm/small && cat /dev/shm/small
df -B1 --output=size /tmp /dev/shm | tail -n +2 | tr -d ' '
"""

    result = run(
        ["sh", "-c", script], workdir, Limits(wall_seconds=20, tmp_bytes=8 * MB), stderr_apart=True
    )

    assert result.output.split("\n") == [
        "/tmp/fill 1 8388608",  # noqa: S108
        "/dev/shm/fill 1 8388608",  # noqa: S108
        "/dev/fill 2",
        "/dev/null 0",
        "small",
        str(8 * MB),
        str(8 * MB),
        "",
    ], result.summary()
    assert result.errors.count("No space left on device") == 2
    assert "/dev/fill: Read-only file system" in result.errors


# --- Disk ----------------------------------------------------------------------------------------


def test_it_kills_a_step_whose_workspace_grows_past_the_quota(workdir: Path) -> None:
    limits = Limits(wall_seconds=20, disk_bytes=16 * MB)
    writer = "i=0; while [ $i -lt {n} ]; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); done"
    slow_writer = writer.replace("; done", "; sleep 0.02; done")

    small = sh(writer.format(n=8) + "; echo written", workdir, limits)
    big = sh(slow_writer.format(n=200) + "; echo written", workdir, limits)

    assert (small.exit_code, small.output) == (0, "written\n"), small.summary()
    assert big.exit_code is None
    assert big.summary() == "[killed: the workspace grew past 16 MB]"
    assert 16 * MB < allocated_bytes(workdir) < 64 * MB


def test_it_kills_a_step_whose_sparse_file_is_past_the_quota(workdir: Path) -> None:
    # 10 GB that cost no block: what git, a diff or a copy of the worktree would read is the
    # apparent size, so that is what the quota counts.
    limits = Limits(wall_seconds=20, disk_bytes=1 << 30, file_bytes=11 << 30)

    grown = sh("truncate -s 10G sparse && echo made && sleep 15; echo survived", workdir, limits)

    assert grown.exit_code is None, grown.summary()
    assert "survived" not in grown.output
    assert grown.summary() == "made\n[killed: the workspace grew past 1024 MB]"
    assert (workdir / "sparse").stat().st_blocks == 0  # it was sparse indeed


def test_it_counts_apparent_sizes_once_per_inode(workdir: Path) -> None:
    (workdir / "data").write_bytes(b"x" * MB)
    (workdir / "link").hardlink_to(workdir / "data")
    (workdir / "sparse").write_bytes(b"")
    os.truncate(workdir / "sparse", 512 * MB)
    (workdir / "out").symlink_to("/usr")

    assert 513 * MB <= allocated_bytes(workdir) < 514 * MB


def test_it_counts_a_tree_deeper_than_python_recursion_goes(workdir: Path) -> None:
    fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1500):  # by descriptors: the path would pass PATH_MAX long before
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with os.fdopen(os.open("data", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as f:
            f.write(b"x" * MB)
    finally:
        os.close(fd)

    try:
        assert allocated_bytes(workdir) > MB
    finally:
        subprocess.run(["rm", "-rf", str(workdir / "d")], check=True)  # rmtree recurses


# --- Cgroups left behind -------------------------------------------------------------------------


@per_sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="cgroup moves of another uid's process need root")
def test_it_removes_the_cgroups_a_killed_worker_left(workdir: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from cluster import sandbox\n"
        "sandbox.for_level(1).run(['sleep', '60'], workdir=Path(sys.argv[1]))"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", code, str(workdir)],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": ""},
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        # One directory per hierarchy, made one after the other: wait for all of them.
        left = wait_for(
            lambda: (
                left if len(left := leftovers(worker.pid)) >= len(cgroups.directories()) else None
            ),
            timeout=30,
            message="the worker's sandbox to start",
            interval=0.05,
        )
    finally:
        worker.kill()
        worker.wait(10)
    live = cgroups.create(cgroups.Caps(64 * MB, 16, None))  # ours: its creator is alive
    assert live is not None

    try:
        removed = cgroups.clean_stale(cgroups.directories())
    finally:
        live.remove()

    assert sorted(removed) == sorted(left)
    assert leftovers(worker.pid) == []
    assert all(path not in removed for path in live.directories())


def leftovers(pid: int) -> list[Path]:
    return [
        path
        for base in cgroups.directories()
        for path in base.iterdir()
        if path.name.startswith(f"{pid}-")
    ]


# --- Other hosts ---------------------------------------------------------------------------------


@pytest.fixture
def fake_v2(tmp_path: Path) -> tuple[str, Path]:
    root = tmp_path / "cg2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma\n")
    (root / "cgroup.subtree_control").write_text("\n")
    (root / "agentos").mkdir()  # the kernel would create its control files; a fake needs them
    (root / "agentos" / "cgroup.subtree_control").write_text("\n")
    return f"41 31 0:38 / {root} rw,relatime - cgroup2 cgroup2 rw\n", root


def test_it_uses_a_delegated_cgroup_v2_with_its_three_controllers(
    fake_v2: tuple[str, Path],
) -> None:
    mountinfo, root = fake_v2

    backend, mode = cgroups.detect(mountinfo, "0::/\n")
    assert backend is not None
    group = backend.create(cgroups.Caps(64 * MB, 32, 0.5))
    group.add(12345)

    assert (mode.name, mode.detail) == ("cgroup-v2", f"one cgroup v2 per sandbox in {root}/agentos")
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (root / "agentos" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    (path,) = group.directories()
    assert path.parent == root / "agentos"
    assert [(path / name).read_text() for name in ("memory.max", "pids.max", "cpu.max")] == [
        str(64 * MB),
        "32",
        "50000 100000",
    ]
    assert (path / "cgroup.procs").read_text() == "12345\n"


def test_it_falls_back_to_rlimits_and_says_why(fake_v2: tuple[str, Path]) -> None:
    mountinfo, root = fake_v2
    (root / "cgroup.controllers").write_text("cpuset io hugetlb\n")  # like this machine's unified

    backend, mode = cgroups.detect(mountinfo, "0::/\n")

    assert backend is None
    assert not mode.per_sandbox
    assert mode.detail.startswith(
        f"no usable cgroup (v2: {root} does not offer memory, pids, cpu;"
        " v1: no memory, pids, cpu hierarchy mounted): memory is capped per process"
    )
