"""`manage.py backup`: one encrypted archive of the whole install (docs/operations.md).

1. One repeatable-read snapshot of the database is taken first; the checksums `--verify`
   compares are taken in it, and `pg_dump` dumps it last (the snapshot is held meanwhile).
2. Between the two, the files: settings from the data dir, artifacts, memory and staging
   repositories as bundles, the workspaces dir as plain files. All are at least as new as the
   snapshot: an artifact's file is written before its row, a repository may hold refs the
   database does not know yet (harmless), never the reverse.
3. Written to `NAME.partial` in the target folder, fsynced and renamed: a backup killed half way
   leaves the previous archives as they were and no file named like an archive; the next one
   removes the stale `.partial`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.migrations.loader import MigrationLoader

from agentos.backups import files, pg
from agentos.backups.sealed import MIN_PASSPHRASE, SealedWriter, begin_entry, end_archive, end_entry
from agentos.core import private, roots, vault
from kernel import crashpoints
from memory import repository as memory_repository
from tools import workspace

SUFFIX = ".agentos-backup"
PARTIAL = ".partial"
# Files of the data dir kept as they are (the run-token key is vault-encrypted already).
DATA_FILES = ("secret_key", "run-tokens.key")
# Folders of the workspaces dir left out of its tar: staging repositories go as bundles.
STAGING = "staging"
CHUNK_BUFFER = 1 << 20  # the archive file's write buffer


class BackupError(Exception):
    """A backup that cannot be made as asked; the message says what to do."""


@dataclass
class Made:
    path: Path
    size: int = 0
    seconds: float = 0.0
    tables: int = 0
    rows: int = 0
    repositories: int = 0
    files: int = 0
    vault_key: str = ""  # "included" | "left out" | "from the environment"
    notes: list[str] = field(default_factory=list)


def default_directory() -> Path:
    return Path(settings.BACKUP_DIR)


def check_passphrase(passphrase: str | None) -> str:
    if not passphrase:
        raise BackupError(
            "No passphrase: archives are always encrypted. Set AGENTOS_BACKUP_PASSPHRASE in the"
            " environment, or run the command in a terminal to be asked for it."
        )
    if len(passphrase) < MIN_PASSPHRASE:
        raise BackupError(
            f"The passphrase is {len(passphrase)} characters long; use at least"
            f" {MIN_PASSPHRASE} (it is the only key to the archive)."
        )
    return passphrase


def archives(directory: Path) -> list[Path]:
    """The complete archives in `directory`, oldest first (by name: the name is the time)."""
    if not directory.is_dir():
        return []
    return sorted(
        p
        for p in directory.iterdir()
        if p.name.startswith("agentos-") and p.name.endswith(SUFFIX) and p.is_file()
    )


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """One backup at a time per folder (the nightly one and a manual one may meet)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(directory / ".backup.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BackupError(f"Another backup is being written to {directory}.") from None
        yield
    finally:
        os.close(fd)


def create(*, directory: Path, passphrase: str, with_vault_key: bool = True) -> Made:
    check_passphrase(passphrase)
    started = time.monotonic()
    with locked(directory):
        for stale in directory.glob(f"*{SUFFIX}{PARTIAL}"):
            stale.unlink(missing_ok=True)
        stamp = datetime.now(UTC)
        final = directory / f"agentos-{stamp:%Y%m%dT%H%M%S}{stamp.microsecond // 1000:03d}Z{SUFFIX}"
        partial = final.with_name(final.name + PARTIAL)
        made = Made(final)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb", buffering=CHUNK_BUFFER) as out:
                sink = SealedWriter(out, passphrase)
                _write(sink, made, stamp=stamp, with_vault_key=with_vault_key)
                sink.close()
                out.flush()
                os.fsync(out.fileno())
            partial.rename(final)
            _sync_dir(directory)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    made.size = final.stat().st_size
    made.seconds = time.monotonic() - started
    return made


def _write(sink: SealedWriter, made: Made, *, stamp: datetime, with_vault_key: bool) -> None:
    with pg.snapshot() as (conn, snapshot_id):
        tables = pg.checksums(conn)
        projects = [
            {"pk": pk, "repository": repository}
            for pk, repository in conn.execute(
                "SELECT id, repository FROM missions_project ORDER BY id"
            ).fetchall()
        ]
        made.tables = len(tables)
        made.rows = sum(t["rows"] for t in tables.values())
        # The schema's version: the applied migrations this code knows (a row left by a
        # migration since renamed or squashed names no schema).
        known = set(MigrationLoader(None, ignore_no_migrations=True).graph.nodes)
        migrations = [
            (app, name)
            for app, name in conn.execute(
                "SELECT app, name FROM django_migrations ORDER BY 1, 2"
            ).fetchall()
            if (app, name) in known
        ]
        manifest = _manifest(stamp, tables, projects, migrations, with_vault_key, made)
        _json_entry(sink, "manifest", manifest)
        _write_files(sink, made, projects)
        if manifest["vault_key"] == "included":
            _write_vault_key(sink)
        out = begin_entry(sink, {"name": "database", "kind": "pg_dump"})
        with tempfile.TemporaryFile() as errors:
            process = pg.dump(snapshot_id, errors)
            files.pump(process.stdout, out)
            if process.wait() != 0:
                errors.seek(0)
                said = errors.read().decode(errors="replace").strip()
                raise BackupError(f"pg_dump failed: {said}")
        end_entry(sink)
    crashpoints.hit("backup_mid_write", run=0)  # the chaos test's kill: most bytes written
    _json_entry(sink, "end", {"database_bytes": out.size, "files": made.files})
    end_archive(sink)


def _manifest(
    stamp: datetime,
    tables: dict[str, Any],
    projects: list[dict[str, Any]],
    migrations: list[tuple[str, str]],
    with_vault_key: bool,
    made: Made,
) -> dict[str, Any]:
    if vault.keys_from_environment():
        made.vault_key = "from the environment"
        made.notes.append(
            f"The vault keys come from {vault.ENV}: they are not in the archive. Keep them; a"
            " restore needs them in its environment to read the stored secrets."
        )
    elif not with_vault_key:
        made.vault_key = "left out"
        made.notes.append(
            "The vault key is left out: after a restore, stored secrets (provider keys,"
            " repository credentials, the nodes' SSH key) are unreadable until you enter them"
            " again."
        )
    elif not vault.key_file().is_file():
        made.vault_key = "none yet (no secret was ever stored)"
    else:
        made.vault_key = "included"
    return {
        "created": stamp.isoformat(),
        "product": _product_version(),
        "migrations": [list(pair) for pair in migrations],
        "roots": roots.named(),
        "tables": tables,
        "projects": [
            {
                "id": p["pk"],
                "repository": p["repository"],
                "staging": workspace.staging_key(p["repository"]) if p["repository"] else "",
            }
            for p in projects
        ],
        "vault_key": made.vault_key,
    }


def _product_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentos")
    except PackageNotFoundError:
        return "0.1.0"


def _write_files(sink: SealedWriter, made: Made, projects: list[dict[str, Any]]) -> None:
    data = Path(settings.DATA_DIR)
    for name in DATA_FILES:
        path = data / name
        if path.is_file() and not path.is_symlink():
            out = begin_entry(sink, {"name": f"data/{name}", "kind": "file"})
            out.write(path.read_bytes())
            end_entry(sink)
    for name, top in (("artifacts", data / "artifacts"), ("node", data / "node")):
        out = begin_entry(sink, {"name": name, "kind": "tree"})
        made.files += files.write_tree(out, top, skip=_skipping(top, made.path.parent))
        end_entry(sink)
    for scope in memory_repository.scopes():
        path = memory_repository.path_of(scope)
        if files.has_refs(path):
            out = begin_entry(sink, {"name": f"memory/{scope}", "kind": "bundle"})
            files.write_bundle(out, path)
            end_entry(sink)
        else:
            _json_entry(sink, f"memory/{scope}", {}, kind="empty")
        made.repositories += 1
    base = roots.workspaces_dir()
    for path in sorted((base / STAGING).glob("*.git")):
        if (path / "HEAD").is_file() and files.has_refs(path):
            out = begin_entry(sink, {"name": f"staging/{path.name}", "kind": "bundle"})
            files.write_bundle(out, path)
            end_entry(sink)
            made.repositories += 1
    for project in projects:
        repository = Path(project["repository"] or "/nonexistent")
        if _under_a_root(repository) or not repository.exists():
            continue
        # The owner's own repository, outside our folders: a restore elsewhere may need it.
        out = begin_entry(sink, {"name": f"project/{project['pk']}", "kind": "bundle"})
        files.write_bundle(out, repository)
        end_entry(sink)
        made.repositories += 1
    # Everything else of the workspaces dir as plain files: worktrees (hostile: never
    # interpreted), their markers, cloned projects, the demo's repositories, environments.
    out = begin_entry(sink, {"name": "workspaces", "kind": "tree"})
    skip = _skipping(base, made.path.parent, STAGING)
    made.files += files.write_tree(out, base, skip=skip)
    end_entry(sink)


def _not_kept(relative: str) -> bool:
    name = Path(relative).name
    return name.startswith(".tmp-") or name.endswith(".lock")


def _skipping(top: Path, backups: Path, *folders: str) -> files.Skip:
    """What a tree of `top` leaves out: temporary files and locks, `folders` (relative), and
    the backup folder itself if it lies inside (an archive must not hold the archives, nor
    itself half written)."""
    left_out = set(folders)
    if backups.resolve().is_relative_to(top.resolve()):
        left_out.add(str(backups.resolve().relative_to(top.resolve())))

    def skip(relative: str) -> bool:
        return _not_kept(relative) or any(
            relative == folder or relative.startswith(folder + "/") for folder in left_out
        )

    return skip


def _under_a_root(path: Path) -> bool:
    text = str(path)
    return any(text == r or text.startswith(r + "/") for r in roots.named().values())


def _write_vault_key(sink: SealedWriter) -> None:
    # Only inside the encrypted stream: the archive's bytes never hold it in the clear.
    keys = vault.key_file()
    if keys.is_file():
        out = begin_entry(sink, {"name": "vault.keys", "kind": "secret"})
        out.write(private.read(keys).encode())
        end_entry(sink)


def _json_entry(sink: SealedWriter, name: str, value: Any, *, kind: str = "json") -> None:
    out = begin_entry(sink, {"name": name, "kind": kind})
    out.write(json.dumps(value, sort_keys=True).encode())
    end_entry(sink)


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
