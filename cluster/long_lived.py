"""A long-lived process in a level-1 sandbox, talking over its stdin and stdout: what an MCP
server started for a run (or for listing its tools) is (docs/design.md §14).

The sandbox is the shell's (`cluster.sandbox.profile`, the same seccomp program, identity,
system mounts and egress), with two differences: it runs on this host rather than on a node the
dispatcher picks (its pipes are held by the worker that owns the session), and it may see host
directories read-only at their own paths (`read_only`: an interpreter and its packages). The
caller starts `argv` with `pass_fds=fds` and `user`/`group` (never root), then calls `close`.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cluster import sandbox
from cluster.runner import bwrap
from cluster.runner.protocol import RpcError, parse_profile

if TYPE_CHECKING:
    from cluster.egress import Attachment


# Where, as root, the host directories the sandbox uid cannot reach are shown to it: a tmpfs
# over this directory in a mount namespace of the server's own (the host's mounts never change).
STAGE = "/mnt"
# Run as root in that namespace: bind each source read-only under the stage, then drop to the
# sandbox identity (setpriv clears the capabilities with the uid) and run the rest.
STAGING = """set -e
mount -t tmpfs -o mode=0755,size=64k agentos-stage "$0"
while [ "$1" != "--" ]; do
  mkdir "$0/$1"; mount --bind "$2" "$0/$1"; mount -o remount,bind,ro "$0/$1"; shift 2
done
shift
exec "$@"
"""


@dataclass
class Spawn:
    argv: list[str]
    fds: list[int]
    closed: bool = field(default=False)

    def close(self) -> None:
        """Close our copies of the descriptors once the process holds its own."""
        if self.closed:
            return
        self.closed = True
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def spawn(
    argv: list[str],
    *,
    run_id: int | None,
    workdir: Path | None = None,
    read_only: tuple[Path, ...] = (),
    egress: Attachment | None = None,
    limits: sandbox.Limits = sandbox.DEFAULT_LIMITS,
    env_dir: Path | None = None,
) -> Spawn:
    """The command line of `argv` in a level-1 sandbox as `run_id`'s identity (the named sandbox
    user without a run), `read_only` directories shown at their own paths, a built environment
    (`env_dir`) read-only at /env with /env/bin first on PATH. Start it as we are
    (it drops to the sandbox identity itself when we are root) with `pass_fds=fds`, then `close`.
    Raises `SandboxUnavailable` when this host cannot sandbox."""
    if not argv:
        raise ValueError("nothing to run: argv is empty")
    built = sandbox.profile(
        1, argv, workdir, limits, sandbox._ready(), run_id=run_id, egress=egress
    )
    try:
        profile = parse_profile(built)
    except RpcError as error:
        raise ValueError(error.message) from None
    root = os.geteuid() == 0
    staged: list[str] = []
    binds: list[tuple[str, str]] = []
    for index, path in enumerate(read_only):
        try:
            bwrap.check_reachable(path, profile.uid, profile.gid)
            binds.append((str(path), str(path)))
        except RpcError:
            if not root:
                raise sandbox.SandboxUnavailable(f"the sandbox cannot reach {path}") from None
            staged += [str(index), str(path)]
            binds.append((f"{STAGE}/{index}", str(path)))
    fds: list[int] = []
    try:
        mounts = bwrap.Mounts(
            bwrap.workdir(workdir) if workdir is not None else None,
            bwrap.git_mounts(workdir.resolve(), writable=False) if workdir is not None else [],
            env_dir,
            False,
            tuple(binds),
        )
        if env_dir is not None:
            bwrap.check_reachable(env_dir, profile.uid, profile.gid)
        command = bwrap.command(profile, mounts, fds)
    except RpcError as error:
        for fd in fds:
            os.close(fd)
        raise sandbox.SandboxUnavailable(error.message) from None
    if root:
        drop = [
            "/usr/bin/setpriv",
            f"--reuid={profile.uid}",
            f"--regid={profile.gid}",
            "--clear-groups",
            "--",
        ]
        command = [*drop, *command]
        if staged:
            command = [
                *("/usr/bin/unshare", "--mount", "--propagation", "private", "--"),
                *("/bin/sh", "-c", STAGING, STAGE, *staged, "--", *command),
            ]
    return Spawn(command, fds)
