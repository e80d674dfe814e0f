"""The level-1 sandbox against real bubblewrap: what a hostile command must not be able to do, and
what an ordinary one must still be able to do. Each escape test asserts the precise failure."""

from __future__ import annotations

import os
import pwd
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import sandbox
from cluster.sandbox import Limits, Result
from tests.cluster.helpers import QUICK, marker, processes_with, python, run, sh
from tests.polling import wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="level 1 is Linux bubblewrap")

# Tries to write each path given; prints "<path> <errno name>" or "<path> written".
WRITE_PROBE = """
import errno, sys
for path in sys.argv[1:]:
    try:
        with open(path, "a") as file:
            file.write("pwned")
    except OSError as error:
        print(path, errno.errorcode[error.errno])
    else:
        print(path, "written")
"""

# Calls what the seccomp filter refuses, directly through libc; prints "<call> <errno name>".
SYSCALL_PROBE = """
import ctypes, errno, os, platform, signal, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def report(name, result):
    print(name, "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()], flush=True)
os.mkdir("/tmp/target")
report("mount", libc.mount(b"none", b"/tmp/target", b"tmpfs", 0, None))
report("unshare", libc.unshare(0x10000000))  # CLONE_NEWUSER
clone = {"x86_64": 56, "aarch64": 220}[platform.machine()]
child = libc.syscall(clone, 0x40000000 | signal.SIGCHLD, 0, 0, 0, 0)  # CLONE_NEWNET
if child == 0:
    os._exit(0)
report("clone", child)
sibling = subprocess.Popen(["sleep", "5"])
report("ptrace", libc.ptrace(16, sibling.pid, 0, 0))  # PTRACE_ATTACH
sibling.kill()
"""

NETWORK_PROBE = """
import os, socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    print("tcp connected")
except OSError as error:
    print("tcp", type(error).__name__)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.settimeout(1)
try:
    udp.sendto(b"x", ("8.8.8.8", 53))
    print("udp answered", udp.recv(512))
except OSError as error:
    print("udp", type(error).__name__)
devices = open("/proc/net/dev").readlines()[2:]
print("interfaces", sorted(line.split(":")[0].strip() for line in devices))
print("sys mounted", os.path.exists("/sys/class/net"))
"""

FORK_PROBE = """
import errno, os, signal, sys
forks = 0
try:
    for _ in range(int(sys.argv[1])):
        if os.fork() == 0:
            signal.pause()
            os._exit(0)
        forks += 1
except OSError as error:
    print("fork failed:", errno.errorcode[error.errno], error.strerror, "after", forks)
"""


@pytest.fixture
def host_listener() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        yield listener


# --- Who and what it sees ------------------------------------------------------------------------


def test_it_runs_as_the_sandbox_user_never_root(workdir: Path) -> None:
    result = sh("id -u; id -g; id -un", workdir)

    uid, gid = sandbox.identity()
    assert result.exit_code == 0, result.summary()
    assert result.output.split() == [str(uid), str(gid), pwd.getpwuid(uid).pw_name]
    assert uid != 0
    if os.geteuid() == 0:  # identity() created it if missing (AGENTOS_SANDBOX_USER names it)
        assert pwd.getpwuid(uid).pw_name == sandbox.sandbox_user()


def test_it_refuses_writes_outside_the_workspace(workdir: Path) -> None:
    name = f"agentos-canary-{secrets.token_hex(4)}"
    result = python(WRITE_PROBE, f"/usr/{name}", f"/etc/{name}", f"/{name}", workdir=workdir)

    assert result.output.splitlines() == [
        f"/usr/{name} EROFS",
        f"/etc/{name} EROFS",
        f"/{name} EROFS",
    ]


def test_it_gives_a_private_tmp_that_vanishes(workdir: Path) -> None:
    name = f"agentos-canary-{secrets.token_hex(4)}"

    result = sh(f"echo secret > /tmp/{name} && cat /tmp/{name}", workdir)

    assert result.output == "secret\n"
    assert not Path("/tmp", name).exists()  # noqa: S108


def test_it_lets_the_workspace_be_written_as_the_sandbox_user(workdir: Path) -> None:
    result = sh("echo hi > f", workdir)

    assert result.exit_code == 0, result.summary()
    assert (workdir / "f").read_text() == "hi\n"
    assert (workdir / "f").stat().st_uid == sandbox.identity()[0]


def test_it_keeps_a_plain_repository_git_dir_read_only(plain_repo: Path) -> None:
    hooks = plain_repo / ".git" / "hooks"

    result = python(
        WRITE_PROBE, ".git/config", ".git/hooks/pre-commit", ".git/HEAD", workdir=plain_repo
    )

    assert result.output.splitlines() == [
        ".git/config EROFS",
        ".git/hooks/pre-commit EROFS",
        ".git/HEAD EROFS",
    ]
    assert "pwned" not in (plain_repo / ".git" / "config").read_text()
    assert not (hooks / "pre-commit").exists()


def test_it_shows_a_linked_worktree_nothing_of_its_repository(worktree: Path) -> None:
    common = worktree.parent / "repo" / ".git"
    gitdir = common / "worktrees" / "worktree"
    (common / "config").write_text('[remote "origin"]\n\turl = https://token@example.invalid\n')
    # Given to the sandbox user, only the missing mount keeps the metadata out of reach.
    sandbox.give(common)

    result = python(
        WRITE_PROBE,
        ".git/config",
        ".git",
        f"{common}/config",
        f"{common}/worktrees/other/HEAD",
        f"{gitdir}/HEAD",
        workdir=worktree,
    )
    git = run(["git", "status"], worktree)
    seen = sh(f"cat .git; cat {common}/config", worktree)

    assert result.output.splitlines() == [
        ".git/config ENOTDIR",
        ".git EROFS",
        f"{common}/config ENOENT",
        f"{common}/worktrees/other/HEAD ENOENT",
        f"{gitdir}/HEAD ENOENT",
    ]
    assert git.exit_code == 128
    assert "not a git repository" in git.output
    assert seen.output.splitlines() == [
        f"gitdir: {gitdir}",
        f"cat: {common}/config: No such file or directory",
    ]
    assert "pwned" not in (common / "config").read_text()


def sandbox_git(workdir: Path, *args: str) -> str:
    result = run(["git", *args], workdir)
    assert result.exit_code == 0, result.summary()
    return result.output.strip()


def test_it_shows_no_host_secrets(workdir: Path) -> None:
    assert Path("/etc/shadow").exists()  # so the test means something

    result = python(
        "import os\n"
        "for path in ('/etc/shadow', '/root'):\n"
        "    try: os.listdir(path) if path == '/root' else open(path).read()\n"
        "    except OSError as error: print(path, type(error).__name__)\n"
        "print(open('/etc/passwd').read(), end='')",
        workdir=workdir,
    )

    lines = result.output.splitlines()
    assert lines[:2] == ["/etc/shadow FileNotFoundError", "/root FileNotFoundError"]
    seen_passwd = "\n".join(lines[2:]) + "\n"
    assert seen_passwd != Path("/etc/passwd").read_text()
    user = pwd.getpwuid(sandbox.identity()[0]).pw_name
    assert [line.split(":")[0] for line in lines[2:]] == ["nobody", user]


def test_it_does_not_pass_our_environment_in(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = secrets.token_hex(16)
    monkeypatch.setenv("AGENTOS_CANARY", canary)

    result = sh(
        "env; tr '\\0' '\\n' < /proc/self/environ; tr '\\0' '\\n' < /proc/1/environ", workdir
    )

    assert result.exit_code == 0, result.summary()
    assert "HOME=/tmp" in result.output  # it did print environments
    assert canary not in result.output
    assert "AGENTOS_CANARY" not in result.output


def test_it_has_no_network_but_its_own_loopback(
    workdir: Path, host_listener: socket.socket
) -> None:
    port = host_listener.getsockname()[1]

    result = python(NETWORK_PROBE, str(port), workdir=workdir)

    assert result.output.splitlines() == [
        "tcp ConnectionRefusedError",  # 127.0.0.1 is the sandbox's own, where nothing listens
        "udp OSError",  # no route: [Errno 101] Network is unreachable
        "interfaces ['lo']",
        "sys mounted False",
    ]
    with pytest.raises(BlockingIOError):
        host_listener.accept()


def test_it_refuses_namespaces_mounts_and_ptrace(workdir: Path) -> None:
    tools = sh("unshare -U true; echo $?; unshare -n true; echo $?", workdir)
    calls = python(SYSCALL_PROBE, workdir=workdir)
    status = sh("grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status", workdir)

    assert tools.output.splitlines() == [
        "unshare: unshare failed: Operation not permitted",
        "1",
        "unshare: unshare failed: Operation not permitted",
        "1",
    ]
    assert calls.output.splitlines() == [
        "mount EPERM",
        "unshare EPERM",
        "clone EPERM",
        "ptrace EPERM",
    ], calls.summary()
    assert status.output.split() == [
        "CapEff:",
        "0000000000000000",
        "NoNewPrivs:",
        "1",
        "Seccomp:",
        "2",
    ]


def test_it_does_not_follow_workspace_symlinks_out(workdir: Path) -> None:
    (workdir / "shadow").symlink_to("/etc/shadow")
    (workdir / "root").symlink_to("/root")

    result = sh("cat shadow; ls root/", workdir)

    assert result.output.splitlines() == [
        "cat: shadow: No such file or directory",
        "ls: cannot access 'root/': No such file or directory",
    ]


# --- Limits and teardown -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["detected", "rlimits_only"])
def test_it_stops_a_fork_bomb_at_the_process_limit(
    workdir: Path, mode: str, request: pytest.FixtureRequest
) -> None:
    run_id = None
    if mode == "rlimits_only":
        request.getfixturevalue("rlimits_only")  # RLIMIT_NPROC instead of pids.max
        # RLIMIT_NPROC counts every process of the uid: a run's own, as the product gives it,
        # not the sandbox user's, which the other tests' sandboxes share at the same moment.
        run_id = 1_000_000 + secrets.randbelow(1_000_000)
        sandbox.give(workdir, run_id)
    tag = marker()

    result = python(
        FORK_PROBE,
        "200",
        tag,
        workdir=workdir,
        limits=Limits(wall_seconds=20, processes=32),
        run_id=run_id,
    )

    assert result.exit_code == 0, result.summary()
    assert result.output.startswith("fork failed: EAGAIN Resource temporarily unavailable after")
    assert int(result.output.split()[-1]) < 32
    assert processes_with(tag) == []
    assert sh("echo still fine", workdir, run_id=run_id).output == "still fine\n"


def test_it_kills_a_shell_fork_bomb_and_everything_it_started(workdir: Path) -> None:
    tag = marker()

    result = run(
        ["bash", "-c", f"sleep {tag} & :(){{ :|:& }};:; wait"],
        workdir,
        Limits(wall_seconds=1, processes=48),
    )

    assert result.timed_out
    assert "Resource temporarily unavailable" in result.output
    assert processes_with(tag) == []


def test_it_applies_the_file_size_and_cpu_time_limits(workdir: Path) -> None:
    # Memory: tests/cluster/test_limits.py.
    limits = Limits(wall_seconds=20, file_bytes=1 << 20, cpu_seconds=1)

    file = sh("head -c 2000000 /dev/zero > big", workdir, limits)
    cpu = python("while True: pass", workdir=workdir, limits=limits)

    assert file.exit_code == 128 + signal.SIGXFSZ
    assert (workdir / "big").stat().st_size == 1 << 20
    assert cpu.exit_code == 128 + signal.SIGXCPU
    assert 900 <= cpu.duration_ms < 5000


def test_it_caps_a_flood_of_output(workdir: Path) -> None:
    result = sh("yes | head -c 50000000", workdir, Limits(wall_seconds=20, output_bytes=100_000))

    assert result.exit_code == 0
    assert len(result.output) == 100_000
    assert result.truncated_bytes == 50_000_000 - 100_000
    assert result.duration_ms < 10_000
    assert result.summary().endswith("\n[output truncated: 49900000 bytes dropped]\n[exit code 0]")


def test_it_kills_the_tree_at_the_wall_clock(workdir: Path) -> None:
    tag = marker()

    result = sh(f"echo started; sleep {tag}", workdir, Limits(wall_seconds=0.5))

    assert result.timed_out
    assert not result.cancelled
    assert result.exit_code is None
    assert 500 <= result.duration_ms < 2500
    assert result.summary() == "started\n[timed out after 0.5 s, killed]"
    assert processes_with(tag) == []


def test_it_kills_the_tree_when_the_run_is_cancelled(workdir: Path) -> None:
    tag, child_tag = marker(), marker()
    stopping = threading.Event()
    timer = threading.Timer(0.3, stopping.set)
    timer.start()

    result = run(
        ["sh", "-c", f"sleep {child_tag} >/dev/null 2>&1 & sleep {tag}"],
        workdir,
        QUICK,
        stopping=stopping,
    )

    timer.join()
    assert result.cancelled
    assert not result.timed_out
    assert result.exit_code is None
    assert 300 <= result.duration_ms < 2000
    assert result.summary() == "[cancelled]"
    assert processes_with(tag) == []
    assert processes_with(child_tag) == []


def test_it_tears_down_what_an_exited_command_left_behind(workdir: Path) -> None:
    tag = marker()

    result = sh(f"sleep {tag} >/dev/null 2>&1 & echo left", workdir)

    assert result.exit_code == 0
    assert result.output == "left\n"
    assert result.duration_ms < 2000
    assert processes_with(tag) == []


# --- What an ordinary command can do -------------------------------------------------------------


def test_it_runs_python(workdir: Path) -> None:
    result = run(["python3", "-c", "print(1+1)"], workdir)

    assert (result.exit_code, result.output) == (0, "2\n")
    assert result.summary() == "2\n[exit code 0]"


def test_it_reports_the_exit_code(workdir: Path) -> None:
    result = sh("echo out; echo err >&2; exit 3", workdir)

    assert result.exit_code == 3
    assert result.output == "out\nerr\n"
    assert result.summary() == "out\nerr\n[exit code 3]"


def test_it_feeds_stdin(workdir: Path) -> None:
    result = run(["cat"], workdir, stdin=b"fed in\n")

    assert result.output == "fed in\n"


def test_it_lets_git_read_the_repository(plain_repo: Path) -> None:
    workdir = plain_repo
    (workdir / "README").write_text("hello\nchanged\n")

    status = run(["git", "status", "--short"], workdir)
    log = run(["git", "log", "--format=%s"], workdir)
    diff = run(["git", "diff"], workdir)

    assert (status.exit_code, status.output) == (0, " M README\n"), status.summary()
    assert (log.exit_code, log.output) == (0, "First commit\n"), log.summary()
    assert diff.exit_code == 0
    assert "+changed" in diff.output


# --- Refusals before anything runs ---------------------------------------------------------------


def test_it_keeps_stderr_apart_when_asked(workdir: Path) -> None:
    script = "echo out; echo err >&2; head -c 300 /dev/zero | tr '\\0' e >&2"

    apart = run(["sh", "-c", script], workdir, Limits(output_bytes=100), stderr_apart=True)
    mixed = run(["sh", "-c", "echo out; echo err >&2"], workdir)

    assert (apart.output, apart.errors) == ("out\n", "err\n" + "e" * 96)
    assert apart.truncated_bytes == 204
    assert apart.summary().startswith("out\nerr\neee")
    assert (mixed.output, mixed.errors) == ("out\nerr\n", "")


def test_it_lets_a_git_step_write_the_git_dir_and_hardens_git(plain_repo: Path) -> None:
    hook = plain_repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\ntouch /workspace/hook-ran\n")
    hook.chmod(0o755)
    sandbox.give(plain_repo)
    (plain_repo / "README").write_text("changed\n")
    commit = ["git", "commit", "--quiet", "-am", "From inside"]

    refused = run(commit, plain_repo)
    committed = run(commit, plain_repo, git_writable=True)
    log = run(["git", "log", "-1", "--format=%an <%ae> %s"], plain_repo)
    copy = "/tmp/copy"  # noqa: S108 (the sandbox's private /tmp)
    clone = run(["git", "clone", "--quiet", "file:///workspace", copy], plain_repo)
    local = run(["git", "clone", "--quiet", "/workspace", copy], plain_repo)

    assert refused.exit_code == 128
    assert "Read-only file system" in refused.output
    assert committed.exit_code == 0, committed.summary()
    assert log.output == "agentos <agent@agentos.invalid> From inside\n"
    assert not (plain_repo / "hook-ran").exists()  # core.hooksPath = /dev/null
    for attempt in (clone, local):
        assert attempt.exit_code == 128
        assert "transport 'file' not allowed" in attempt.output


def test_it_refuses_a_git_symlink(workdir: Path, plain_repo: Path) -> None:
    (workdir / ".git").symlink_to(plain_repo / ".git")

    with pytest.raises(ValueError, match="neither a directory nor a gitdir file"):
        run(["true"], workdir)


@pytest.mark.skipif(os.geteuid() != 0, reason="per-run uids need root")
def test_it_gives_each_run_its_own_uid(workdir: Path) -> None:
    run_id = 7
    sandbox.give(workdir, run_id)

    result = run(["sh", "-c", "id -u; id -g; id -un; echo hi > f"], workdir, run_id=run_id)

    assert sandbox.identity(run_id) == (sandbox.UID_BASE + 7, sandbox.UID_BASE + 7)
    assert result.output.split() == [str(sandbox.UID_BASE + 7)] * 2 + ["agentos-run-7"]
    assert (workdir / "f").stat().st_uid == sandbox.UID_BASE + 7
    assert sandbox.identity(None) != sandbox.identity(run_id)


@pytest.mark.skipif(os.geteuid() != 0, reason="per-run uids need root")
def test_it_keeps_a_run_from_signalling_another_runs_processes(workdir: Path) -> None:
    tag = marker()
    sandbox.give(workdir, 11)
    victim = threading.Thread(
        target=lambda: run(["sleep", tag], workdir, Limits(wall_seconds=5), run_id=11)
    )
    victim.start()
    found = wait_for(
        lambda: processes_with(f"sleep\0{tag}"), timeout=10, message="the victim to start"
    )
    pid = found[0].split(":")[0]

    def kill_as(run_id: int) -> str:
        uid, gid = sandbox.identity(run_id)
        done = subprocess.run(
            ["/usr/bin/python3", "-c", f"import os; os.kill({pid}, 0)"],
            user=uid,
            group=gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stderr.strip().splitlines()[-1] if done.returncode else "allowed"

    try:
        assert kill_as(12) == "PermissionError: [Errno 1] Operation not permitted"
        assert kill_as(11) == "allowed"  # the same check passes for the run's own uid
    finally:
        os.kill(int(pid), signal.SIGKILL)
        victim.join(10)


@pytest.mark.parametrize("run_id", [-1, sandbox.MAX_RUN_ID + 1, 2**40])
def test_it_refuses_a_run_id_out_of_the_uid_range(run_id: int) -> None:
    with pytest.raises(ValueError, match=f"run id {run_id} is out of the sandbox uid range"):
        sandbox.identity(run_id)


def test_it_keeps_per_run_uids_where_bubblewrap_can_map_them() -> None:
    if os.geteuid() == 0:
        assert sandbox.identity(sandbox.MAX_RUN_ID) == (2**31 - 1, 2**31 - 1)
    assert sandbox.UID_BASE + sandbox.MAX_RUN_ID < 2**31


def test_the_highest_run_id_runs_in_the_sandbox(workdir: Path) -> None:
    sandbox.give(workdir, run_id=sandbox.MAX_RUN_ID)
    done = sandbox.for_level(1).run(["id", "-u"], workdir=workdir, run_id=sandbox.MAX_RUN_ID)
    assert (done.exit_code, done.output.strip()) == (0, str(sandbox.UID_BASE + sandbox.MAX_RUN_ID))


def test_it_refuses_a_workdir_that_is_not_a_directory(workdir: Path) -> None:
    (workdir / "file").write_text("")

    with pytest.raises(ValueError, match="is not a directory"):
        run(["true"], workdir / "file")
    with pytest.raises(ValueError, match="is not a directory"):
        run(["true"], workdir / "missing")


@pytest.mark.parametrize("system", ["/", "/etc", "/usr/lib"])
def test_it_refuses_to_mount_a_system_directory_as_the_workspace(system: str) -> None:
    with pytest.raises(ValueError, match="is a system directory"):
        run(["true"], Path(system))


@pytest.mark.skipif(os.geteuid() != 0, reason="as an ordinary user our own dirs are reachable")
def test_it_explains_a_workdir_the_sandbox_user_cannot_reach(sandbox_base: Path) -> None:
    private = sandbox_base / f"private-{secrets.token_hex(4)}"
    private.mkdir(mode=0o700)
    (private / "work").mkdir()

    with pytest.raises(sandbox.SandboxUnavailable) as raised:
        run(["true"], private / "work")

    assert f"cannot reach {private}/work: {private} is not searchable" in str(raised.value)
    assert oct(private.stat().st_mode & 0o777) == oct(0o700)  # explained, never changed


@pytest.mark.parametrize(
    ("level", "message"),
    [
        (0, "level 0 has no shell"),
        (3, "level 3 (a disposable VM) is not available yet"),
        (7, "unknown sandbox level 7"),
    ],
)
def test_it_has_no_shell_at_level_zero_nor_three(level: int, message: str) -> None:
    # Level 2 is the node's VM (cluster/runner/vm.py, tests/cluster/test_vm.py).
    with pytest.raises(sandbox.SandboxUnavailable, match=re.escape(message)):
        sandbox.for_level(level)
    assert sandbox.for_level(1).level == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="creating users needs root")
def test_it_creates_the_sandbox_user_once_even_when_processes_race() -> None:
    name = f"agentos-t{secrets.token_hex(3)}"
    code = "from cluster import identity; import sys; print(*identity._ensure_user(sys.argv[1]))"
    try:
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", code, name],
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "DJANGO_SETTINGS_MODULE": ""},
                cwd=Path(__file__).resolve().parents[2],
            )
            for _ in range(4)
        ]
        answers = {racer.communicate(timeout=30)[0] for racer in racers}
        entry = pwd.getpwnam(name)
        assert answers == {f"{entry.pw_uid} {entry.pw_gid}\n"}
        entries = Path("/etc/passwd").read_text().splitlines()
        assert [line.split(":")[0] for line in entries].count(name) == 1
        assert entry.pw_shell == "/usr/sbin/nologin"
        assert entry.pw_uid < 1000  # a system user
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def test_it_summarises_for_the_model() -> None:
    cut = Result(
        exit_code=1,
        output="partial",
        truncated_bytes=12,
        timed_out=False,
        cancelled=False,
        duration_ms=5,
    )
    slow = Result(
        exit_code=None,
        output="",
        truncated_bytes=0,
        timed_out=True,
        cancelled=False,
        duration_ms=300_004,
    )

    assert cut.summary() == "partial\n[output truncated: 12 bytes dropped]\n[exit code 1]"
    assert slow.summary() == "[timed out after 300 s, killed]"
