"""Paths inside a worktree, walked on directory descriptors.

The worktree is the agent's: between two tool calls any directory in it may have become a
symbolic link, and a FIFO may sit where a file was. So the harness never lets the kernel resolve a
path string inside it: each component is looked up relative to the descriptor of the directory
above, without following; a symbolic link is followed only by reading its text and resolving it
ourselves, beneath the top (`/workspace/...`, the sandbox's view of the top, included); and a file
is opened only once it is known to be regular, `O_NONBLOCK | O_NOFOLLOW`, and checked again on the
open descriptor. Nothing here can block on a FIFO or lead out of the worktree.

Users: the file tools (`tools.files`), the permission check on resolved paths
(`tools.permissions`), the shell's protected-path snapshots (`tools.snapshots`) and the
compaction's rehydration (`missions.engine.relief`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tools.base import ToolError
from tools.workspace import SANDBOX_MOUNT, relative, root

MAX_LINKS = 40  # as the kernel's own limit on symbolic links in one lookup
DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


def kind(mode: int) -> str:
    """What a file type is called in a refusal."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


@dataclass
class Located:
    """Where a path ends: `name` in the directory `parent` (a descriptor we hold), `rel` its
    resolved workspace-relative path. `missing` names directories between `parent` and `name`
    that do not exist yet (a file to be created there); `name` is "" for the top itself."""

    parent: int
    name: str
    rel: str
    missing: list[str] = field(default_factory=list)
    made: list[int] = field(default_factory=list)  # descriptors of the directories we created

    def lstat(self) -> os.stat_result | None:
        """The entry itself (a link is not followed), or None if there is none."""
        if self.missing:
            return None
        if not self.name:
            return os.fstat(self.parent)
        try:
            return os.stat(self.name, dir_fd=self.parent, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def make_parents(self, owner: tuple[int, int] | None) -> None:
        """Create the missing directories (0755, given to `owner`), each beneath the last."""
        for name in self.missing:
            # Made already (a replay): opened without following, like any other.
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=self.parent)
            fd = os.open(name, DIR_FLAGS, dir_fd=self.parent)
            self.made.append(fd)
            if owner is not None:
                os.chown(name, *owner, dir_fd=self.parent, follow_symlinks=False)
            self.parent = fd
        self.missing = []


@contextmanager
def locate(top: Path, path: str, *, follow: bool = True) -> Iterator[Located]:
    """Resolve `path` beneath `top` (see the module docstring); `follow=False` leaves a final
    symbolic link unresolved (the link itself is the subject). Refuses with a `ToolError` any
    path that leads out, through `..` or a link."""
    shown = path
    rel = relative(path)
    stack: list[tuple[int, str]] = [(os.open(top, DIR_FLAGS & ~os.O_NOFOLLOW), "")]
    located: Located | None = None
    try:
        located = _walk(stack, [p for p in rel.split("/") if p not in ("", ".")], shown, follow)
        yield located
    finally:
        for fd in [fd for fd, _ in stack] + (located.made if located else []):
            os.close(fd)


def _walk(stack: list[tuple[int, str]], pending: list[str], shown: str, follow: bool) -> Located:
    links = 0
    through_final_link = False

    def joined(*names: str) -> str:
        return "/".join([*(n for _, n in stack[1:]), *names]) or "."

    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if len(stack) == 1:
                # `relative` refused a textual escape, so only a link can bring us here.
                if through_final_link:
                    raise ToolError(f"{shown}: a symbolic link out of the workspace; refused.")
                raise ToolError(f"{shown}: the path leaves the workspace through a symbolic link.")
            os.close(stack.pop()[0])
            continue
        last = not pending
        parent = stack[-1][0]
        try:
            info = os.stat(part, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            rest = [p for p in pending if p not in ("", ".")]
            if ".." in rest:
                raise ToolError(f"{shown}: {joined(part)} does not exist.") from None
            if not rest:
                return _hand_over(stack, part, joined(part))
            missing = [part, *rest[:-1]]
            return _hand_over(stack, rest[-1], joined(*missing, rest[-1]), missing)
        if stat.S_ISLNK(info.st_mode):
            if last and not follow:
                return _hand_over(stack, part, joined(part))
            links += 1
            if links > MAX_LINKS:
                raise ToolError(f"{shown}: too many levels of symbolic links.")
            through_final_link = through_final_link or last
            target = os.readlink(part, dir_fd=parent)
            if target == SANDBOX_MOUNT or target.startswith(SANDBOX_MOUNT + "/"):
                # The sandbox sees the top at /workspace: such a link points inside.
                while len(stack) > 1:
                    os.close(stack.pop()[0])
                target = target[len(SANDBOX_MOUNT) :].lstrip("/")
            elif target.startswith("/") or not target:
                if last or through_final_link:
                    raise ToolError(f"{shown}: a symbolic link out of the workspace; refused.")
                raise ToolError(f"{shown}: the path leaves the workspace through a symbolic link.")
            pending[:0] = target.split("/")
            continue
        if last:
            return _hand_over(stack, part, joined(part))
        if not stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{shown}: {joined(part)} is not a directory.")
        try:
            fd = os.open(part, DIR_FLAGS, dir_fd=parent)
        except (NotADirectoryError, OSError) as error:  # swapped since the stat: not followed
            raise ToolError(f"{shown}: {joined(part)} changed while being opened.") from error
        stack.append((fd, part))
    # The path ended on a directory already on the stack (the top, or through `..` / `.`).
    if len(stack) == 1:
        return _hand_over(stack, "", ".")
    fd, name = stack.pop()
    os.close(fd)
    return _hand_over(stack, name, joined(name))


def _hand_over(
    stack: list[tuple[int, str]], name: str, rel: str, missing: list[str] | None = None
) -> Located:
    """The located entry borrows the innermost descriptor; `locate` closes them all."""
    return Located(stack[-1][0], name, rel, missing or [])


def read_regular(located: Located, shown: str, limit: int) -> bytes:
    """The bytes of a regular file (at most `limit`, else a refusal), never blocking."""
    info = located.lstat()
    if info is None:
        raise ToolError(f"{shown}: no such file.")
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{shown}: a directory, not a file (use list_files).")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{shown}: {kind(info.st_mode)}, not a regular file; refused.")
    try:
        fd = os.open(located.name, READ_FLAGS, dir_fd=located.parent)
    except OSError as error:
        raise ToolError(f"{shown}: cannot open: {error.strerror}.") from None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):  # swapped between the look and the open
            raise ToolError(f"{shown}: {kind(opened.st_mode)}, not a regular file; refused.")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ToolError(f"{shown}: larger than {limit} bytes; read it with the shell.")
    return b"".join(chunks)


def resolved(top: Path, path: str, *, follow: bool = True) -> str:
    """`path`'s resolved workspace-relative path (links inside followed), or a `ToolError`."""
    with locate(top, path, follow=follow) as found:
        return found.rel


def read_file(top: Path, path: str, limit: int) -> tuple[str, bytes]:
    """(resolved relative path, content) of a regular file beneath `top`."""
    with locate(top, path) as found:
        return found.rel, read_regular(found, path, limit)


def host_dir(name: str) -> Path:
    """`root()/<name>`, a directory only this process's user reaches (0700, made by us): where the
    harness keeps what the sandbox must never see or change. Refused if someone else made it."""
    path = root() / name
    try:
        path.mkdir(mode=0o700)
        path.chmod(0o700)  # mkdir's mode is masked by the umask
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise RuntimeError(f"{path} is not a directory of ours; refusing to keep anything there")
    if stat.S_IMODE(info.st_mode) != 0o700:
        raise RuntimeError(f"{path} is open to others (mode {stat.S_IMODE(info.st_mode):o})")
    return path
