"""`manage.py restore ARCHIVE`: an archive onto an empty install, here or on another machine.

1. Refused unless the archive's version is this code's, the database is empty and the
   workspaces, memory and artifacts folders hold nothing (another install may use them). A
   marker (`restore.pending`) is written before anything else: a restore cut short during the
   files is run again as is; one cut short after the database is finished instead of refused.
2. The files first, in the archive's order: settings, artifacts, repositories, the workspaces
   dir, the vault key. The database comes last, in one transaction: until it commits, nothing
   counts and the restore can be run again.
3. Then `finish`: every stored path under the archive's roots (data, workspaces, memory dirs)
   re-rooted under this install's (`reroot`), staging repositories renamed after their
   project's new path, leases reset (any worker claims the runs at once), the memory index
   brought to its repositories. The journal's request hashes read paths relative to their root
   (`kernel.journal.request_hash`): replays agree, and no journaled push is made again.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.migrations.loader import MigrationLoader

from agentos.backups import files, pg
from agentos.backups.archive import DATA_FILES
from agentos.backups.sealed import ArchiveError, Entry, SealedReader, entries
from agentos.core import private, roots, vault
from kernel import crashpoints
from memory import notes
from memory import repository as memory_repository
from memory import store as memory_store
from tools import workspace

PENDING = "restore.pending"  # in the data dir, from the database's restore until `finish` ends


class RestoreError(Exception):
    """A restore refused or failed; the message says why and what to do."""


@dataclass
class Restored:
    manifest: dict[str, Any] = field(default_factory=dict)
    entries: int = 0
    rerooted: dict[str, str] = field(default_factory=dict)  # old root -> new root
    notes: list[str] = field(default_factory=list)


def restore(*, archive: Path, passphrase: str) -> Restored:
    with archive.open("rb") as source:
        reader = SealedReader(source, passphrase)  # a wrong passphrase is said first
        return _restore(reader)


def _restore(reader: SealedReader) -> Restored:
    """1. the manifest (the first entry) and its version; 2. an empty database (or an
    interrupted restore's, finished); 3. every other entry; 4. `finish`."""
    marker = Path(settings.DATA_DIR) / PENDING
    stream = entries(reader)
    first = next(stream, None)
    if first is None or first.header["name"] != "manifest":
        raise ArchiveError("The archive does not start with its manifest: it is malformed.")
    done = Restored(manifest=json.loads(first.stream.read()))
    _check_version(done.manifest)
    occupied = [] if marker.is_file() else _occupied()  # a restore cut short may go again
    if occupied:
        raise RestoreError(
            f"These folders already hold an install's files: {', '.join(occupied)}. A restore"
            " goes onto empty folders only (another install may be using them): point"
            " AGENTOS_DATA_DIR, AGENTOS_WORKSPACES_DIR or AGENTOS_MEMORY_DIR at new ones."
        )
    tables = pg.tables_in()
    if tables and marker.is_file():
        done.manifest = json.loads(marker.read_text())
        finish(done)
        done.notes.append("An interrupted restore was finished (its database was restored).")
        return done
    if tables:
        raise RestoreError(
            f"The database already holds {tables} tables: a restore goes onto an empty install"
            " only. Point AGENTOS_DATA_DIR at a new folder (or DATABASE_URL at an empty"
            " database) and run it again."
        )
    private.replace(marker, json.dumps(done.manifest))
    ended = False
    for entry in stream:
        done.entries += 1
        if entry.header["name"] == "end":
            ended = True
        else:
            _restore_entry(entry, done)
    if not ended:
        raise ArchiveError("The archive has no end entry: it is incomplete.")
    crashpoints.hit("restore_before_finish", run=0)  # the chaos test's kill: database restored
    finish(done)
    return done


def _occupied() -> list[str]:
    """The folders of this install that already hold repositories, worktrees or artifacts."""
    base = workspace.root()
    found = [
        str(base / name)
        for name in ("worktrees", "staging", "projects")
        if (base / name).is_dir() and any((base / name).iterdir())
    ]
    if memory_repository.scopes():
        found.append(str(memory_repository.root()))
    artifacts = Path(settings.DATA_DIR) / "artifacts"
    if artifacts.is_dir() and any(artifacts.iterdir()):
        found.append(str(artifacts))
    return found


def _restore_entry(entry: Entry, done: Restored) -> None:
    name, kind = entry.header["name"], entry.header["kind"]
    _check_name(name)
    data = Path(settings.DATA_DIR)
    if name.startswith("data/"):
        target = data / name.removeprefix("data/")
        private.replace(target, entry.stream.read().decode())
    elif name in ("artifacts", "node"):
        files.extract_tree(entry.stream, data / name)
    elif name.startswith("memory/"):
        scope = name.removeprefix("memory/")
        if kind == "empty":
            memory_repository.ensure(scope)
        else:
            path = memory_repository.path_of(scope)
            files.read_bundle(entry.stream, path, bare_config=memory_repository.CONFIG)
    elif name.startswith("staging/"):
        # Under its old name; `finish` renames it after its project's new path.
        path = workspace.root() / "staging" / name.removeprefix("staging/")
        files.read_bundle(entry.stream, path, bare_config=workspace.STAGING_CONFIG)
    elif name.startswith("project/"):
        _restore_project(entry, done)
    elif name == "workspaces":
        files.extract_tree(entry.stream, workspace.root())
    elif name == "vault.keys":
        if vault.keys_from_environment():
            done.notes.append(f"The archive's vault key was not written: {vault.ENV} is set.")
        else:
            private.replace(vault.key_file(), entry.stream.read().decode())
    elif name == "database":
        restore_database(entry, None)
    else:
        raise ArchiveError(f"The archive holds an entry this version does not know: {name!r}.")


# What an entry may be called: nothing in an archive names a path outside the install's folders,
# even one made by someone who holds the passphrase.
_DATA = "|".join(map(re.escape, DATA_FILES))
NAMES = re.compile(
    rf"^(data/({_DATA})|artifacts|node|workspaces|vault\.keys|database|memory/[a-z0-9_/-]+"
    r"|staging/[0-9a-f]{16}\.git|project/[0-9]+)$"
)


def _check_name(name: str) -> None:
    if not NAMES.fullmatch(name) or ".." in name:
        raise ArchiveError(f"The archive holds an entry this version does not know: {name!r}.")
    if name.startswith("memory/"):
        notes.check_scope(name.removeprefix("memory/"))


def _restore_project(entry: Entry, done: Restored) -> None:
    """The owner's repository outside our folders, cloned back where it was if it is missing."""
    project_id = int(entry.header["name"].removeprefix("project/"))
    known = {p["id"]: p["repository"] for p in done.manifest.get("projects", [])}
    path = Path(known.get(project_id, ""))
    if not known.get(project_id) or path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".restore-", suffix=".bundle") as out:
        files.pump(entry.stream, out)
        out.flush()
        workspace.host_git(path.parent, "clone", "--quiet", out.name, str(path))
    done.notes.append(f"The project repository {path} was missing: cloned back from the archive.")


def restore_database(entry: Entry, database: str | None) -> None:
    """The entry's dump into `database` (None: this install's), in one transaction."""
    with tempfile.TemporaryFile() as errors:
        process = pg.restore_into(database, errors)
        stdin = process.stdin
        if stdin is None:
            raise RestoreError("pg_restore started without a pipe to read from.")
        try:
            files.pump(entry.stream, stdin)
            stdin.close()
        except BrokenPipeError:
            pass  # pg_restore stopped early: its own error says why
        if process.wait() != 0:
            errors.seek(0)
            said = errors.read().decode(errors="replace").strip()
            raise RestoreError(f"pg_restore failed: {said}")


def _check_version(manifest: dict[str, Any]) -> None:
    """The same migrations as this code's, both ways. A newer archive cannot be read; an older
    one must be restored by its own version and upgraded there: the restore re-roots paths in
    the schema and journal of this version (an older journal's hashes are not rooted yet)."""
    known = set(MigrationLoader(None, ignore_no_migrations=True).graph.nodes)
    archived = {(app, name) for app, name in manifest.get("migrations", [])}
    product = manifest.get("product", "?")
    newer = sorted(f"{app}.{name}" for app, name in archived - known)
    if newer:
        raise RestoreError(
            f"The archive was made by a newer agentos (product {product}): this version lacks"
            f" its migrations {', '.join(newer[:5])}. Restore it with the version that made it."
        )
    older = sorted(f"{app}.{name}" for app, name in known - archived)
    if older:
        raise RestoreError(
            f"The archive was made by an older agentos (product {product}): it lacks the"
            f" migrations {', '.join(older[:5])}. Restore it with the version that made it, then"
            " upgrade that install."
        )


# --- After the database -------------------------------------------------------------------------


def finish(done: Restored) -> None:
    old = dict(done.manifest.get("roots", {}))
    new = roots.named()
    done.rerooted = {old[n]: new[n] for n in old if n in new and old[n] != new[n]}
    if done.rerooted:
        with transaction.atomic():
            reroot(old, new)
    _reset_leases()
    _rename_staging(done.manifest, old, new)
    _rewrite_markers(old, new)
    _rewrite_remotes(old, new)
    for scope in memory_repository.scopes():
        memory_store.sync(scope)
    if done.manifest.get("vault_key") == "left out":
        done.notes.append(
            "The archive holds no vault key: stored secrets (provider keys, repository"
            " credentials, the nodes' SSH key) cannot be read. Enter them again in the console."
        )
    (Path(settings.DATA_DIR) / PENDING).unlink(missing_ok=True)


def rewrite(text: str, old: dict[str, str], new: dict[str, str]) -> str:
    """`text` with every old root (followed by "/" or '"') replaced by the new root of that name;
    the same two patterns as `roots.neutral`, through markers (a new root may lie inside an old
    one)."""
    for name, path in sorted(old.items(), key=lambda item: len(item[1]), reverse=True):
        marker = f"\x01{name}\x01"
        text = text.replace(path + "/", marker + "/").replace(path + '"', marker + '"')
    for name, path in old.items():
        text = text.replace(f"\x01{name}\x01", new.get(name, path))
    return text


TEXT_COLUMNS = """
SELECT c.table_schema, c.table_name, c.column_name, c.data_type FROM information_schema.columns c
JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.table_schema NOT IN ('pg_catalog', 'information_schema') AND t.table_type = 'BASE TABLE'
  AND c.data_type IN ('text', 'character varying', 'json', 'jsonb')
"""


def reroot(old: dict[str, str], new: dict[str, str]) -> None:
    """Every text and JSON column of every table re-rooted with `rewrite`'s patterns, in SQL."""
    ordered = sorted(old.items(), key=lambda item: len(item[1]), reverse=True)
    with connection.cursor() as cursor:
        cursor.execute(TEXT_COLUMNS)
        for schema, table, column, kind in cursor.fetchall():
            expression, params = f'"{column}"::text', []
            for name, path in ordered:
                expression = f"replace(replace({expression}, %s, %s), %s, %s)"
                marker = f"\x01{name}\x01"
                params += [path + "/", marker + "/", path + '"', marker + '"']
            for name, path in ordered:
                expression = f"replace({expression}, %s, %s)"
                params += [f"\x01{name}\x01", new.get(name, path)]
            cast = {"jsonb": "::jsonb", "json": "::json"}.get(kind, "")
            likes = [f"%{path}%" for _, path in ordered]
            cursor.execute(
                f'UPDATE "{schema}"."{table}" SET "{column}" = ({expression}){cast}'  # noqa: S608  # names from the catalog
                f' WHERE "{column}"::text LIKE ANY(%s)',
                [*params, likes],
            )


def _reset_leases() -> None:
    """No worker of the old install holds anything: every run is claimable at once."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE kernel_run SET lease_owner = '', lease_expires_at = NULL,"
            " runnable_at = CASE WHEN status = 'running' THEN now() ELSE runnable_at END"
            " WHERE lease_owner <> '' OR lease_expires_at IS NOT NULL OR status = 'running'"
        )
        cursor.execute("DELETE FROM kernel_workerbeat")


def _rename_staging(manifest: dict[str, Any], old: dict[str, str], new: dict[str, str]) -> None:
    folder = workspace.root() / "staging"
    for project in manifest.get("projects", []):
        if not project["repository"] or not project["staging"]:
            continue
        before = folder / f"{project['staging']}.git"
        after = folder / f"{workspace.staging_key(rewrite(project['repository'], old, new))}.git"
        if before != after and before.is_dir() and not after.exists():
            before.rename(after)


def _rewrite_markers(old: dict[str, str], new: dict[str, str]) -> None:
    """The host-owned markers beside worktrees name the project's repository by its path."""
    for marker in (workspace.root() / "worktrees").glob(f"*{workspace.READY}"):
        text = workspace.read_marker(marker)
        if text is not None and not marker.is_symlink():
            fresh = rewrite(text, old, new)
            if fresh != text:
                workspace.write_marker(marker, fresh)


def _rewrite_remotes(old: dict[str, str], new: dict[str, str]) -> None:
    """A project repository under our folders (the demo's, a clone) whose remote is a path
    under them too (the demo's bare remote) points at the moved remote."""
    from missions.models import Project

    for repository in Project.objects.exclude(repository="").values_list("repository", flat=True):
        path = Path(repository)
        if not path.exists() or not any(str(path).startswith(r + "/") for r in new.values()):
            continue
        listed = workspace.host_git(
            path, "config", "--get-regexp", r"^remote\..*\.url$", check=False
        ).stdout
        for line in listed.splitlines():
            key, _, url = line.partition(" ")
            fresh = rewrite(url, old, new)
            if fresh != url:
                workspace.host_git(path, "config", key, fresh)
