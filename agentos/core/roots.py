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
    configured = os.environ.get("AGENTOS_WORKSPACES_DIR")
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return Path("/var/lib/agentos") / _data_key(str(settings.DATA_DIR))
    return Path(settings.DATA_DIR) / "workspaces"


@cache
def _data_key(data_dir: str) -> str:
    return hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:12]


def named() -> dict[str, str]:
    """Each root's name and absolute path, as text without a trailing slash."""
    return {
        WORKSPACES: str(workspaces_dir()),
        MEMORY: str(settings.MEMORY_DIR),
        DATA: str(settings.DATA_DIR),
    }


def neutral(text: str) -> str:
    """`text` with every root it names (a root followed by "/" or by a JSON string's closing
    quote) replaced by a marker of the root's name: the same text on every machine once the
    roots are re-rooted alike (`agentos.backups.reroot` rewrites stored text with the same two
    patterns). The longest root first: the workspaces dir may lie inside the data dir."""
    for name, path in _ordered(tuple(named().items())):
        if path in text:
            marker = f"\x00{name}\x00"  # never in JSON text: a NUL is always escaped there
            text = text.replace(path + "/", marker + "/").replace(path + '"', marker + '"')
    return text


@cache
def _ordered(roots: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    return sorted(roots, key=lambda item: len(item[1]), reverse=True)
