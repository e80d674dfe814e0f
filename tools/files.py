"""File tools: read, list, search (ripgrep), edit by exact replacement, write.

They run in the harness on the run's worktree, never following a symlink out of it. Edits and
overwrites need a fresh read: refused if the file changed since the agent last read it (another
process, the agent's own shell command), so it never overwrites what it has not seen.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from kernel.models import Effect
from tools import workspace
from tools.base import Risk, Tool, ToolEnv, ToolError
from tools.models import FileView

MAX_READ_BYTES = 2_000_000
MAX_LIST_ENTRIES = 2000
SKIPPED_DIRS = {".git", "node_modules", "__pycache__", ".venv"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_bytes(path: Path, shown: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ToolError(f"{shown}: no such file.") from None
    except IsADirectoryError:
        raise ToolError(f"{shown}: a directory, not a file (use list_files).") from None
    except OSError as error:
        raise ToolError(f"{shown}: cannot open: {error.strerror}.") from None
    with os.fdopen(fd, "rb") as handle:
        if not Path(f"/proc/self/fd/{handle.fileno()}").is_file():
            raise ToolError(f"{shown}: not a regular file.")
        data = handle.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        raise ToolError(f"{shown}: larger than {MAX_READ_BYTES} bytes; read it with the shell.")
    return data


def _view(env: ToolEnv, rel: str, sha: str) -> None:
    FileView.objects.update_or_create(
        run_id=env.run_id, path=rel, defaults={"sha256": sha, "pending_sha256": ""}
    )


def _read(env: ToolEnv, arguments: dict[str, Any]) -> str:
    top = env.need_workspace()
    rel = workspace.relative(arguments["path"])
    data = _read_bytes(workspace.resolve(top, rel), rel)
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
    top = env.need_workspace()
    rel = workspace.relative(arguments.get("path", "."))
    start = workspace.resolve(top, rel)
    if not start.is_dir() or start.is_symlink():
        raise ToolError(f"{rel}: not a directory.")
    depth = arguments.get("depth", 3)
    entries: list[str] = []
    for here, dirs, files in os.walk(start, followlinks=False):
        level = len(Path(here).relative_to(start).parts)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        if level + 1 >= depth:
            dirs_shown, dirs[:] = list(dirs), []
        else:
            dirs_shown = []
        base = Path(here).relative_to(top)
        for name in sorted(files):
            entries.append(str(base / name))
        entries.extend(f"{base / name}/" for name in dirs_shown)
        if len(entries) > MAX_LIST_ENTRIES:
            break
    entries.sort()
    more = len(entries) - MAX_LIST_ENTRIES
    text = "\n".join(entries[:MAX_LIST_ENTRIES]) or "(empty directory)"
    return text + (f"\n[{more} more entries]" if more > 0 else "")


def _search(env: ToolEnv, arguments: dict[str, Any]) -> str:
    top = env.need_workspace()
    rel = workspace.relative(arguments.get("path", "."))
    workspace.resolve(top, rel)
    argv = ["rg", "--line-number", "--no-heading", "--color", "never", "--max-count", "200"]
    if arguments.get("glob"):
        argv += ["--glob", arguments["glob"]]
    if arguments.get("ignore_case"):
        argv.append("--ignore-case")
    argv += ["--regexp", arguments["pattern"], "--", rel]
    try:
        done = subprocess.run(  # noqa: S603  # the pattern is one argv item, after --regexp
            argv,
            cwd=top,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except FileNotFoundError:
        raise ToolError("ripgrep (rg) is not installed on this node.") from None
    if done.returncode == 1:
        return "No match."
    if done.returncode != 0:
        raise ToolError(f"search failed: {done.stderr.strip()}")
    return done.stdout


def _write_atomically(env: ToolEnv, rel: str, target: Path, data: bytes) -> None:
    """Announce the new hash, write beside the file and rename over it: a crash leaves the old
    file or the new one, and a replay knows which."""
    FileView.objects.update_or_create(
        run_id=env.run_id, path=rel, defaults={"pending_sha256": _sha(data)}
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".agentos-write-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        written = Path(temp)
        keep_mode = target.exists() and not target.is_symlink()
        written.chmod(target.stat().st_mode & 0o777 if keep_mode else 0o644)
        from cluster.sandbox import give

        give(written)
        written.replace(target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _view(env, rel, _sha(data))


def _landed(env: ToolEnv, rel: str, target: Path) -> bool:
    """On a replayed step: did this very write already land before the crash?"""
    if not env.call.replay or not target.is_file():
        return False
    pending = (
        FileView.objects.filter(run_id=env.run_id, path=rel)
        .values_list("pending_sha256", flat=True)
        .first()
    )
    return bool(pending) and pending == _sha(target.read_bytes())


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
    rel = workspace.relative(arguments["path"])
    target = workspace.resolve(top, rel)
    if _landed(env, rel, target):
        return f"Edited {rel}."
    current = _read_bytes(target, rel)
    _fresh(env, rel, current)
    text = current.decode("utf-8", errors="strict") if current else ""
    old, new = arguments["old_text"], arguments["new_text"]
    if old == new:
        raise ToolError("old_text and new_text are the same: nothing to edit.")
    found = text.count(old)
    if found == 0:
        raise ToolError(f"{rel}: old_text not found (it must match exactly, whitespace included).")
    if found > 1 and not arguments.get("replace_all"):
        raise ToolError(
            f"{rel}: old_text occurs {found} times; give more context to make it unique, or set"
            " replace_all."
        )
    _write_atomically(env, rel, target, text.replace(old, new).encode())
    return f"Edited {rel} ({found} replacement{'s' if found > 1 else ''})."


def _write(env: ToolEnv, arguments: dict[str, Any]) -> str:
    top = env.need_workspace()
    rel = workspace.relative(arguments["path"])
    target = workspace.resolve(top, rel)
    data = arguments["content"].encode()
    if _landed(env, rel, target):
        return f"Wrote {rel} ({len(data)} bytes)."
    if target.is_symlink() or target.is_dir():
        raise ToolError(f"{rel}: not a regular file.")
    if target.exists():
        _fresh(env, rel, _read_bytes(target, rel))
    _write_atomically(env, rel, target, data)
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
