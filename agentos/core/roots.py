"""The named roots an install keeps its files under: the data dir, the workspaces dir and the
memory dir. A path under one of them means the same thing on another machine once the root is
moved (a restore elsewhere: `agentos.backups.restore`), so what is derived from a stored path
and must not change with the machine — a journaled request's hash (`kernel.journal`) — reads it
relative to its root.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

from django.conf import settings

WORKSPACES = "workspaces"
DATA = "data"
MEMORY = "memory"


def workspaces_dir() -> Path:
    """Where worktrees, staging repositories and the demo's repositories live (created by
    `tools.workspace.root`): `AGENTOS_WORKSPACES_DIR`; as root, one directory per data dir under
    /var/lib/agentos (sandbox uids must traverse to it: docs/design.md §14); else in the data
    dir."""
    return _workspaces(os.environ.get("AGENTOS_WORKSPACES_DIR"), settings.DATA_DIR)


@cache
def _workspaces(configured: str | None, data_dir: Path | str) -> Path:
    data_dir = Path(data_dir)
    if configured:
        return Path(configured).absolute()  # as the settings' roots are: `neutral` needs it
    if os.geteuid() == 0:
        key = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
        return Path("/var/lib/agentos") / key
    return data_dir / "workspaces"


def named() -> dict[str, str]:
    """Each root's name and absolute path, as text without a trailing slash."""
    return dict(_ordered_roots())


def neutral(text: str) -> str:
    """`text` with every root it names (a root followed by "/" or by a JSON string's closing
    quote) replaced by a marker of the root's name: the same text on every machine once the
    roots are re-rooted alike (`agentos.backups.restore` rewrites stored text with the same two
    patterns). The longest root first: the workspaces dir may lie inside the data dir.

    On every journal hash, a replay's included: the roots are worked out once per value of the
    settings and variable they come from, and not at all for a text that names no path (most
    steps' requests): every root is absolute, so it holds a "/"."""
    if "/" not in text:
        return text
    for name, path in _ordered_roots():
        if path in text:
            marker = f"\x00{name}\x00"  # never in JSON text: a NUL is always escaped there
            text = text.replace(path + "/", marker + "/").replace(path + '"', marker + '"')
    return text


def _ordered_roots() -> tuple[tuple[str, str], ...]:
    # The settings' own objects as the cache's key: no path is made or hashed anew per call.
    return _ordered(
        os.environ.get("AGENTOS_WORKSPACES_DIR"), settings.DATA_DIR, settings.MEMORY_DIR
    )


@cache
def _ordered(
    configured: str | None, data_dir: Path | str, memory_dir: Path | str
) -> tuple[tuple[str, str], ...]:
    roots = {
        WORKSPACES: str(_workspaces(configured, data_dir)),
        MEMORY: str(memory_dir),
        DATA: str(data_dir),
    }
    return tuple(sorted(roots.items(), key=lambda item: len(item[1]), reverse=True))
