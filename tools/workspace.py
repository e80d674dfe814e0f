"""Where agents work: one repository per writing run, a host-owned staging repository per
project, and paths inside a worktree.

Everything the agent wrote is hostile to the host (docs/design.md §13): no host process ever runs
git on a run's worktree. The host only creates it, from data: a fresh `git init` fetched from the
project's staging repository, handed to the run's sandbox uid and checked out by git inside the
sandbox. From then on every git operation on it runs in the sandbox (`tools.git`); what leaves it
for the outside world is a bundle (data) imported into the staging repository (`import_bundle`),
which the host reads, shows and pushes with credentials the sandbox never sees.

The staging repository (`staging`) is ours: bare, its configuration written by us (no hooks,
filters, textconv, submodules, fsmonitor), its remotes copied from the project's repository (the
owner's, trusted). The run's repository has no remote and no configuration of value: nothing to
steal from inside.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import posixpath
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from agentos.core import roots
from cluster.sandbox import Limits, SandboxUnavailable, for_level, give
from kernel.models import Run
from tools.base import ToolError

SANDBOX_MOUNT = "/workspace"  # where the sandbox sees the worktree
GIT_TIMEOUT = 120
STOP_POLL_SECONDS = 0.2
READY = ".ready"  # beside a worktree: written once it is complete (host-owned, outside it)
BASE_REF = "refs/agentos/base"  # in a run's repository: the commit it started from
PROJECT_HEAD = "refs/agentos/project-head"  # in staging: the project's HEAD, as last fetched
MAX_BUNDLE_BYTES = 2 << 30

# Configuration every host-side git call carries, whatever repository it touches: nothing a
# repository could hold runs (hooks, fsmonitor, filters are never configured in our repos), no
# user or system configuration, no prompt.
HARDENED = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "submodule.recurse=false",
    "-c",
    "protocol.ext.allow=never",
    "-c",
    "user.name=agentos",
    "-c",
    "user.email=agent@agentos.invalid",
    "-c",
    "commit.gpgsign=false",
)


def root() -> Path:
    """The directory holding worktrees, staging repositories and the demo's repositories.

    The sandbox uids must be able to traverse to their worktrees: as root, the data directory
    may sit under a private home (/root is 0700), so it lives under /var/lib/agentos instead,
    one directory per data directory; as an ordinary user, bwrap runs as that user and the data
    directory does. Only directories created here are given a mode (searchable, not listable):
    the product never changes a directory it did not make.
    """
    base = roots.workspaces_dir()
    if not base.is_dir():
        make_dirs(base, 0o711 if os.geteuid() == 0 else 0o700)
    return base


def make_dirs(path: Path, mode: int) -> None:
    """`mkdir -p` that sets `mode` on the directories it creates, and only on those."""
    missing = []
    for part in (path, *path.parents):
        if part.is_dir():
            break
        missing.append(part)
    for part in reversed(missing):
        with contextlib.suppress(FileExistsError):
            part.mkdir()
            part.chmod(mode)  # mkdir's mode is masked by the umask


def host_git(
    cwd: Path,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    stopping: threading.Event | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git on the host, on a repository the agent never wrote: the project's own, a staging
    repository, a fresh run repository before it is handed over, a remote. Never on a worktree.

    `env` adds to the minimal environment (credentials for a push, passed this way so that no
    argv shows them to other users of the machine). `stopping` (the step's) kills it within
    `STOP_POLL_SECONDS`; so does the deadline.
    """
    full_env = git_environment(env)
    argv = ["git", *HARDENED, *args]
    command = subcommand(args)
    process = subprocess.Popen(  # noqa: S603  # an argv list, no shell
        argv,
        cwd=cwd,
        env=full_env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    deadline = time.monotonic() + GIT_TIMEOUT
    pending = stdin
    while True:
        # A remote that hangs must not hold a cancelled run: look at `stopping` every tick.
        try:
            out, err = process.communicate(pending, timeout=STOP_POLL_SECONDS)
            break
        except subprocess.TimeoutExpired:
            pending = None  # communicate() keeps feeding what it started
            why = None
            if stopping is not None and stopping.is_set():
                why = "cancelled"
            elif time.monotonic() > deadline:
                why = f"took longer than {GIT_TIMEOUT} s; stopped"
            if why:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                raise ToolError(f"git {command}: {why}.") from None
    done = subprocess.CompletedProcess(argv, process.returncode, out, err)
    if check and done.returncode != 0:
        raise ToolError(f"git {command} failed: {(done.stderr or done.stdout).strip()}")
    return done


def git_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """The minimal environment of a host git, plus `env`."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root()),  # no ~/.gitconfig of ours
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "LANG": "C.UTF-8",
        **(env or {}),
    }


def subcommand(args: tuple[str, ...]) -> str:
    """The git command among `args` (after any `-c name=value`)."""
    words = iter(args)
    for word in words:
        if word == "-c":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return args[0] if args else "git"


# --- The staging repository -----------------------------------------------------------------


def staging(repository: str) -> Path:
    """The host-owned bare repository standing for the project at `repository`: created on first
    use, its remotes kept equal to the project's. Only root (us) can read it."""
    project = Path(repository)
    if not (project / ".git").exists() and not (project / "HEAD").exists():
        raise ToolError(f"{repository} is not a git repository.")
    path = root() / "staging" / f"{staging_key(repository)}.git"
    with _locked(path):
        if not (path / "HEAD").is_file():
            _create_staging(path)
        _copy_remotes(project, path)
        _forget_push_settings(path)
    return path


def staging_key(repository: str) -> str:
    """The name of the staging repository of the project at `repository` (a restore elsewhere
    renames each to its project's new key: `agentos.backups.restore`)."""
    return hashlib.sha256(str(Path(repository).resolve()).encode()).hexdigest()[:16]


# A staging repository's whole configuration besides its remotes (a restore sets it too).
STAGING_CONFIG = {
    # Run repositories fetch exact commits from here (the run's base, by its hash).
    "uploadpack.allowAnySHA1InWant": "true",
    "core.logAllRefUpdates": "false",
    "gc.auto": "0",  # refs/agentos/* keep what runs need; gc runs when we say
}


def _create_staging(path: Path) -> None:
    temp = path.with_name(path.name + ".new")
    shutil.rmtree(temp, ignore_errors=True)
    make_dirs(temp.parent, 0o700)
    host_git(temp.parent, "init", "--quiet", "--bare", str(temp))
    temp.chmod(0o700)
    for key, value in STAGING_CONFIG.items():
        host_git(temp, "config", key, value)
    temp.rename(path)


def _copy_remotes(project: Path, path: Path) -> None:
    """The project's remotes (names and URLs) as the staging repository's, and only them."""
    wanted = _remotes(project)
    present = _remotes(path)
    for name in present.keys() - wanted.keys():
        host_git(path, "remote", "remove", name)
    for name, url in wanted.items():
        if name not in present:
            host_git(path, "remote", "add", name, url)
        elif present[name] != url:
            host_git(path, "remote", "set-url", name, url)


# A push from staging sends one commit to one branch (an explicit refspec): nothing configured
# may widen it (refspecs, mirroring, following tags) or send it elsewhere (a push URL).
PUSH_SETTINGS = r"^(remote\..*\.(push|mirror|pushurl|receivepack)|push\..*)$"


def _forget_push_settings(path: Path) -> None:
    listed = host_git(path, "config", "--get-regexp", PUSH_SETTINGS, check=False).stdout
    for key in {line.partition(" ")[0] for line in listed.splitlines()}:
        host_git(path, "config", "--unset-all", key)


def _remotes(repo: Path) -> dict[str, str]:
    listed = host_git(repo, "config", "--get-regexp", r"^remote\..*\.url$", check=False).stdout
    found = {}
    for line in listed.splitlines():
        key, _, url = line.partition(" ")
        found[key.removeprefix("remote.").removesuffix(".url")] = url
    return found


def remote_names(staging_repo: Path) -> list[str]:
    return sorted(_remotes(staging_repo))


def remote_url(staging_repo: Path, name: str) -> str:
    return _remotes(staging_repo).get(name, "")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer at a time on a staging repository (several runs of one project share it)."""
    make_dirs(path.parent, 0o700)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# --- A project cloned from a URL -------------------------------------------------------------

# A clone or fetch talks to the network with the protocols a remote uses, never `file` or `ext`.
PROTOCOLS = (
    "-c",
    "protocol.allow=never",
    *("-c", "protocol.https.allow=always"),
    *("-c", "protocol.http.allow=always"),
    *("-c", "protocol.ssh.allow=always"),
)


def clone(url: str, env: Mapping[str, str]) -> Path:
    """A bare copy of the repository at `url`, owned by us and kept under the workspaces root:
    the project's repository from then on (runs fetch from it; pushes go to its `origin`).

    Nothing of the remote is interpreted: a bare clone checks out no tree and takes no config
    or hook from it, and every received object is checked. Made beside its final path and
    renamed into place, so a clone cut short leaves nothing a project could point at.
    """
    folder = root() / "projects"
    make_dirs(folder, 0o700)
    path = folder / f"{uuid.uuid4().hex}.git"
    building = path.with_name(path.name + ".new")
    try:
        _from_remote(
            folder,
            *PROTOCOLS,
            "-c",
            "transfer.fsckObjects=true",
            "clone",
            "--quiet",
            "--bare",
            "--",
            url,
            str(building),
            env=env,
        )
        # `fetch` keeps its branches equal to the remote's (a bare clone sets no refspec).
        host_git(building, "config", "remote.origin.fetch", "+refs/heads/*:refs/heads/*")
        host_git(building, "config", "gc.auto", "0")
        building.rename(path)
    except BaseException:
        if building.exists():
            remove(building)
        raise
    return path


def refresh(repository: Path, env: Mapping[str, str]) -> None:
    """The project's cloned repository brought up to its remote's branches."""
    _from_remote(repository, *PROTOCOLS, "fetch", "--quiet", "--prune", "origin", env=env)


def _from_remote(cwd: Path, *args: str, env: Mapping[str, str]) -> None:
    """`host_git` talking to a remote, its failure said in the remote's words (git's last
    `fatal:` line), a credential asked for or refused said as such."""
    done = host_git(cwd, *args, env=env, check=False)
    if done.returncode == 0:
        return
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    fatal = [line.removeprefix("fatal: ") for line in lines if line.startswith("fatal:")]
    said = fatal[-1] if fatal else (lines[-1] if lines else f"exit code {done.returncode}")
    if "could not read Username" in said or "Authentication failed" in said:
        said = "the remote asks for a credential, or refused the one given"
    raise ToolError(said)


# --- A run's repository -----------------------------------------------------------------------


def ensure_worktree(run_id: int, repository: str, base: str = "HEAD") -> Path:
    """The run's repository on branch `agentos/run-<id>` at `base`, created once (idempotent on
    replay: a complete one is recognised by its host-owned marker, which also names what it was
    made from, so a stale one — a run id reused after a database reset — is made again).

    1. The project's commits are fetched into the staging repository (host git, trusted data).
    2. A fresh repository is made beside the final path: `git init`, fetch of the base commit
       from staging, branch and HEAD — all host git on a directory nobody else has touched.
    3. It is handed to the run's sandbox uid and checked out by git inside the sandbox.
    4. It is renamed into place, then the marker is written. A crash before the marker leaves
       nothing that counts: the next attempt starts again from 2.
    """
    stage = staging(repository)
    with _locked(stage):
        _fetch_project(stage, repository)
        sha = _resolve_base(Path(repository), base)
        host_git(stage, "update-ref", f"refs/agentos/run-{run_id}/base", sha)
    path = root() / "worktrees" / f"run-{run_id}"
    marker = path.with_name(path.name + READY)
    identity = json.dumps({"repository": repository, "base": sha, "run": _run_identity(run_id)})
    if path.is_dir() and read_marker(marker) == identity:
        return path
    marker.unlink(missing_ok=True)
    make_dirs(path.parent, 0o711 if os.geteuid() == 0 else 0o700)
    building = path.with_name(path.name + ".new")
    for leftover in (path, building):
        if leftover.exists() or leftover.is_symlink():
            remove(leftover)
    building.mkdir(mode=0o700)
    host_git(building, "init", "--quiet", "--initial-branch", f"agentos/run-{run_id}")
    host_git(building, "fetch", "--quiet", "--no-tags", str(stage), sha)
    host_git(building, "update-ref", f"refs/heads/agentos/run-{run_id}", sha)
    host_git(building, "update-ref", BASE_REF, sha)
    give(building, run_id)  # 0700: other runs' uids cannot even look in
    _checkout(building, run_id)
    building.rename(path)
    write_marker(marker, identity)
    return path


def _fetch_project(stage: Path, repository: str) -> None:
    """The project's branches and HEAD, as the project's repository has them, into staging."""
    host_git(
        stage,
        "fetch",
        "--quiet",
        "--no-tags",
        repository,
        "+refs/heads/*:refs/project/*",
        f"+HEAD:{PROJECT_HEAD}",
    )


def pin_project_head(repository: str, ref: str) -> str:
    """The commit of the project's default branch head (its repository's HEAD, fetched into the
    staging repository), kept there under `ref` so that it stays fetchable whatever the
    project's branches do next. Never a run's worktree, never a ref a run wrote."""
    if not ref.startswith("refs/agentos/") or ref.startswith("refs/agentos/run-"):
        raise ValueError(f"{ref} is not a ref of ours")
    stage = staging(repository)
    no_commit = ToolError("The project's repository has no commit on its default branch.")
    if host_git(
        Path(repository), "rev-parse", "--verify", "--quiet", "HEAD", check=False
    ).returncode:
        raise no_commit  # an empty repository: its HEAD names a branch not made yet
    with _locked(stage):
        _fetch_project(stage, repository)
        found = host_git(
            stage, "rev-parse", "--verify", "--quiet", f"{PROJECT_HEAD}^{{commit}}", check=False
        )
        if found.returncode != 0:
            raise no_commit
        sha = found.stdout.strip()
        host_git(stage, "update-ref", ref, sha)
    return sha


def adopt_base(repository: str, source_run: int, run_id: int) -> None:
    """A fork starts from its source's base: the staging repository keeps it under the fork's
    name too (a push's bundle and preview are relative to it)."""
    stage = staging(repository)
    with _locked(stage):
        base = host_git(stage, "rev-parse", f"refs/agentos/run-{source_run}/base").stdout.strip()
        host_git(stage, "update-ref", f"refs/agentos/run-{run_id}/base", base)


def remove_worktree(run_id: int, repository: str) -> None:
    """Everything kept for a run's workspace, gone: the repository (with its marker and any
    half-made one), and its refs in the staging repository. Idempotent."""
    folder = root() / "worktrees"
    for path in (
        folder / f"run-{run_id}",
        folder / f"run-{run_id}.new",
        folder / f"run-{run_id}{READY}",
    ):
        if path.is_dir() and not path.is_symlink():
            # rm, not shutil.rmtree: a tree nested deeper than Python's stack is removed too.
            subprocess.run(  # noqa: S603  # fixed program, a path of ours
                ["/bin/rm", "-rf", "--one-file-system", "--", str(path)], check=True
            )
        else:
            path.unlink(missing_ok=True)
    if repository and Path(repository).exists():
        stage = staging(repository)
        with _locked(stage):
            listed = host_git(
                stage, "for-each-ref", "--format=%(refname)", f"refs/agentos/run-{run_id}/"
            ).stdout.split()
            for ref in listed:
                host_git(stage, "update-ref", "-d", ref)


def _resolve_base(project: Path, base: str) -> str:
    if base.startswith("-"):
        raise ToolError(f"{base!r} is not a commit of the project.")
    found = host_git(project, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", check=False)
    if found.returncode != 0:
        raise ToolError(f"{base!r} is not a commit of the project's repository.")
    return found.stdout.strip()


def _run_identity(run_id: int) -> str:
    created = Run.objects.filter(pk=run_id).values_list("created_at", flat=True).first()
    return created.isoformat() if created else ""


def _checkout(path: Path, run_id: int) -> None:
    try:
        done = for_level(1).run(
            ["git", "reset", "--hard", "--quiet", "HEAD"],
            workdir=path,
            run_id=run_id,
            git_writable=True,
            limits=Limits(wall_seconds=GIT_TIMEOUT),
        )
    except SandboxUnavailable as error:
        raise ToolError(f"No sandbox on this node: {error}") from None
    if done.exit_code != 0:
        raise ToolError(f"Could not check out the run's workspace: {done.summary()}")


def remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


def read_marker(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def write_marker(path: Path, text: str) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".marker-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    Path(temp).replace(path)


# --- Paths inside a worktree ----------------------------------------------------------------


def relative(path: str) -> str:
    """A workspace-relative, normalised path; the sandbox's /workspace/... is accepted too."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("A path is required.")
    if "\x00" in path:
        raise ToolError("A path cannot contain a NUL byte.")
    text = path.strip()
    if text == SANDBOX_MOUNT or text.startswith(SANDBOX_MOUNT + "/"):
        text = text[len(SANDBOX_MOUNT) :].lstrip("/") or "."
    if text.startswith("/") or text.startswith("~"):
        raise ToolError(f"{path}: absolute paths are refused; use a path inside the workspace.")
    normal = posixpath.normpath(text)
    if normal == ".." or normal.startswith("../"):
        raise ToolError(f"{path}: the path leaves the workspace.")
    return normal
