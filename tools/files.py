"""File tools: read, list, search (ripgrep), edit by exact replacement, write.

They run in the harness on the run's worktree, which the agent may have filled with links, FIFOs
and sockets: paths are resolved on directory descriptors beneath the worktree (`tools.safefs`),
only regular files are opened, never blocking, and a write is judged against the protected paths
again on the path it resolves to at that moment. `search` runs ripgrep in the sandbox. Edits and
overwrites need a fresh read: refused if the file changed since the agent last read it (another
process, the agent's own shell command), so it never overwrites what it has not seen.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import secrets
import stat
import time
from typing import Any

from cluster.sandbox import Limits, SandboxUnavailable, for_level, identity
from kernel.models import Effect
from tools import permissions, safefs, workspace
from tools.base import Risk, Tool, ToolEnv, ToolError
from tools.models import FileView

MAX_READ_BYTES = 2_000_000
MAX_LIST_ENTRIES = 2000
LIST_SECONDS = 20.0  # a listing is cut here (a huge tree), and at once on a stop
SEARCH_SECONDS = 60
SKIPPED_DIRS = {".git", "node_modules", "__pycache__", ".venv"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _view(env: ToolEnv, rel: str, sha: str) -> None:
    FileView.objects.update_or_create(
        run_id=env.run_id, path=rel, defaults={"sha256": sha, "pending_sha256": ""}
    )


def _read(env: ToolEnv, arguments: dict[str, Any]) -> str:
    top = env.need_workspace()
    # Views are keyed by the resolved path: a read through a link counts for the file it names.
    rel, data = safefs.read_file(top, arguments["path"], MAX_READ_BYTES)
    _view(env, rel, _sha(data))
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    first = arguments.get("offset", 1)
    count = arguments.get("limit", 2000)
    shown = lines[first - 1 : first - 1 + count]
    numbered = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(shown, start=first))
    rest = len(lines) - (first - 1 + len(shown))
    tail = f"\n[{rest} more lines: read on with offset={first + len(shown)}]" if rest > 0 else ""
    return (numbered or "(empty file)") + tail


def _list(env: ToolEnv, arguments: dict[str, Any]) -> str:
    """The walk is on directory descriptors (`os.fwalk`): entries are classified from the
    directory listing, never opened, and a directory swapped for a link is not followed."""
    top = env.need_workspace()
    shown = arguments.get("path", ".")
    depth = arguments.get("depth", 3)
    deadline = time.monotonic() + LIST_SECONDS
    entries: list[str] = []
    cut = ""
    with safefs.locate(top, shown) as found:
        info = found.lstat()
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{shown}: not a directory.")
        start = found.rel
        name = found.name or "."
        for here, dirs, files, fd in os.fwalk(name, dir_fd=found.parent, follow_symlinks=False):
            if env.call.stopping.is_set():
                cut = "[listing stopped: the run is stopping]"
                break
            if time.monotonic() > deadline:
                cut = f"[listing cut after {LIST_SECONDS:g} s: list a smaller directory]"
                break
            inner = posixpath.relpath(here, name)
            level = 0 if inner == "." else inner.count("/") + 1
            # fwalk counts a link to a directory among the directories (and never enters it):
            # it is listed as the entry it is.
            links = [d for d in dirs if _is_link(fd, d)]
            files = [*files, *links]
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and d not in links)
            if level + 1 >= depth:
                dirs_shown, dirs[:] = list(dirs), []
            else:
                dirs_shown = []
            base = posixpath.normpath(posixpath.join(start, inner))
            entries.extend(_entry(base, item) for item in sorted(files))
            entries.extend(f"{_entry(base, item)}/" for item in dirs_shown)
            if len(entries) > MAX_LIST_ENTRIES:
                break
    entries.sort()
    more = len(entries) - MAX_LIST_ENTRIES
    text = "\n".join(entries[:MAX_LIST_ENTRIES]) or "(empty directory)"
    text += f"\n[{more} more entries]" if more > 0 else ""
    return text + (f"\n{cut}" if cut else "")


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _entry(base: str, name: str) -> str:
    return name if base == "." else f"{base}/{name}"


def _search(env: ToolEnv, arguments: dict[str, Any]) -> str:
    """ripgrep runs in the sandbox, as the run's sandbox user: it reads what the agent wrote
    (ignore files, which may be FIFOs, nested repositories), so never on the host."""
    top = env.need_workspace()
    with safefs.locate(top, arguments.get("path", ".")) as found:
        info = found.lstat()
        if info is None:
            raise ToolError(f"{arguments.get('path')}: no such file or directory.")
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            raise ToolError(f"{found.rel}: {safefs.kind(info.st_mode)}; nothing to search.")
        rel = found.rel
    argv = ["rg", "--no-config", "--line-number", "--no-heading", "--color", "never"]
    argv += ["--max-count", "200"]
    if arguments.get("glob"):
        argv += ["--glob", arguments["glob"]]
    if arguments.get("ignore_case"):
        argv.append("--ignore-case")
    argv += ["--regexp", arguments["pattern"], "--", rel]
    try:
        done = for_level(1).run(
            argv,
            workdir=top,
            limits=Limits(wall_seconds=SEARCH_SECONDS, cpu_seconds=SEARCH_SECONDS),
            stopping=env.call.stopping,
            run_id=env.run_id,
        )
    except SandboxUnavailable as error:
        raise ToolError(f"No sandbox on this node to search in: {error}") from None
    if done.cancelled:
        raise ToolError("search: cancelled.")
    if done.timed_out:
        raise ToolError(f"search: no answer within {SEARCH_SECONDS} s; narrow the path or glob.")
    if done.exit_code == 1:
        return "No match."
    if done.exit_code != 0:
        raise ToolError(f"search failed: {done.output.strip()}")
    if done.truncated_bytes:
        return f"{done.output}\n[output truncated: {done.truncated_bytes} bytes dropped]"
    return done.output


def _owner(env: ToolEnv) -> tuple[int, int] | None:
    """Who files the harness creates in the worktree belong to: the run's sandbox user."""
    if os.geteuid() != 0:
        return None
    return identity(env.run_id)


def _refuse_protected(rel: str, shown: str) -> None:
    """Judged again at execution time, on the path resolved now: whatever the links became
    since the verdict, nothing is written to a protected path."""
    why = permissions.protected(rel)
    if why:
        via = "" if rel == workspace.relative(shown) else f" ({shown} leads to {rel})"
        raise ToolError(f"Refused: {why}{via}.")
    why = permissions.protected(shown)  # a link named like a protected path is one too
    if why:
        raise ToolError(f"Refused: {why}.")


def _write_atomically(env: ToolEnv, found: safefs.Located, data: bytes, mode: int) -> None:
    """Announce the new hash, write beside the file and rename over it: a crash leaves the old
    file or the new one, and a replay knows which. Every call is relative to the directory's
    descriptor: nothing here follows a link."""
    FileView.objects.update_or_create(
        run_id=env.run_id, path=found.rel, defaults={"pending_sha256": _sha(data)}
    )
    owner = _owner(env)
    found.make_parents(owner)
    temp = f".agentos-write-{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o600, dir_fd=found.parent)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, *owner)
        finally:
            os.close(fd)
        os.rename(temp, found.name, src_dir_fd=found.parent, dst_dir_fd=found.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=found.parent)
        raise
    _view(env, found.rel, _sha(data))


def _landed(env: ToolEnv, found: safefs.Located) -> bool:
    """On a replayed step: did this very write already land before the crash?"""
    if not env.call.replay:
        return False
    pending = (
        FileView.objects.filter(run_id=env.run_id, path=found.rel)
        .values_list("pending_sha256", flat=True)
        .first()
    )
    if not pending:
        return False
    try:
        return pending == _sha(safefs.read_regular(found, found.rel, MAX_READ_BYTES))
    except ToolError:
        return False


def _fresh(env: ToolEnv, rel: str, current: bytes) -> None:
    seen = (
        FileView.objects.filter(run_id=env.run_id, path=rel)
        .values_list("sha256", flat=True)
        .first()
    )
    if not seen:
        raise ToolError(f"{rel}: read the file before changing it.")
    if seen != _sha(current):
        raise ToolError(
            f"{rel}: the file changed since you last read it; read it again, then edit."
        )


def _edit(env: ToolEnv, arguments: dict[str, Any]) -> str:
    top = env.need_workspace()
    shown = arguments["path"]
    with safefs.locate(top, shown) as found:
        rel = found.rel
        _refuse_protected(rel, shown)
        if _landed(env, found):
            return f"Edited {rel}."
        current = safefs.read_regular(found, rel, MAX_READ_BYTES)
        _fresh(env, rel, current)
        text = current.decode("utf-8", errors="strict") if current else ""
        old, new = arguments["old_text"], arguments["new_text"]
        if old == new:
            raise ToolError("old_text and new_text are the same: nothing to edit.")
        found_count = text.count(old)
        if found_count == 0:
            raise ToolError(
                f"{rel}: old_text not found (it must match exactly, whitespace included)."
            )
        if found_count > 1 and not arguments.get("replace_all"):
            raise ToolError(
                f"{rel}: old_text occurs {found_count} times; give more context to make it"
                " unique, or set replace_all."
            )
        info = found.lstat()
        mode = info.st_mode & 0o777 if info is not None else 0o644
        _write_atomically(env, found, text.replace(old, new).encode(), mode)
    return f"Edited {rel} ({found_count} replacement{'s' if found_count > 1 else ''})."


def _write(env: ToolEnv, arguments: dict[str, Any]) -> str:
    top = env.need_workspace()
    shown = arguments["path"]
    data = arguments["content"].encode()
    # A final link is not followed: write_file replaces files, it does not write through links.
    with safefs.locate(top, shown, follow=False) as found:
        rel = found.rel
        _refuse_protected(rel, shown)
        if _landed(env, found):
            return f"Wrote {rel} ({len(data)} bytes)."
        info = found.lstat()
        mode = 0o644
        if info is not None:
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"{rel}: {safefs.kind(info.st_mode)}, not a regular file; refused.")
            _fresh(env, rel, safefs.read_regular(found, rel, MAX_READ_BYTES))
            mode = info.st_mode & 0o777  # no set-id bit on what the harness writes
        _write_atomically(env, found, data, mode)
    return f"Wrote {rel} ({len(data)} bytes)."


def _path_subject(arguments: dict[str, Any]) -> str:
    try:
        return workspace.relative(arguments.get("path", "."))
    except ToolError:
        return str(arguments.get("path", ""))


PATH = {"type": "string", "minLength": 1, "maxLength": 1000}

READ_FILE = Tool(
    name="read_file",
    description="Read a text file of the workspace, with line numbers (offset/limit in lines).",
    input_schema={
        "type": "object",
        "properties": {
            "path": PATH,
            "offset": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 5000},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_read,
    subject=_path_subject,
)

LIST_FILES = Tool(
    name="list_files",
    description="List the files under a directory of the workspace (.git and caches skipped).",
    input_schema={
        "type": "object",
        "properties": {"path": PATH, "depth": {"type": "integer", "minimum": 1, "maximum": 10}},
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_list,
    subject=_path_subject,
)

SEARCH = Tool(
    name="search",
    description="Search the workspace's files for a regular expression (ripgrep).",
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "maxLength": 1000},
            "path": PATH,
            "glob": {"type": "string", "maxLength": 200},
            "ignore_case": {"type": "boolean"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_search,
    subject=_path_subject,
)

EDIT_FILE = Tool(
    name="edit_file",
    description=(
        "Replace an exact piece of text in a file you have read (refused if the file changed"
        " since). old_text must be unique unless replace_all is set."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": PATH,
            "old_text": {"type": "string", "minLength": 1},
            "new_text": {"type": "string"},
            "replace_all": {"type": "boolean"},
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.WORKSPACE_WRITE,
    run=_edit,
    subject=_path_subject,
)

WRITE_FILE = Tool(
    name="write_file",
    description="Create a file, or replace one you have read, with the given content.",
    input_schema={
        "type": "object",
        "properties": {"path": PATH, "content": {"type": "string", "maxLength": 2_000_000}},
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.WORKSPACE_WRITE,
    run=_write,
    subject=_path_subject,
)

FILE_TOOLS = [READ_FILE, LIST_FILES, SEARCH, EDIT_FILE, WRITE_FILE]
