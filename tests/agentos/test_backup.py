"""Backup and restore, real everything: a running install (the demo mission waiting for the
owner's approval of its push) backed up, restored by `manage.py restore` in another process onto
a fresh database, data dir and workspaces dir, and resumed there to `done` with exactly one push;
a backup SIGKILLed half way; `--verify`; a wrong passphrase; a tampered archive."""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone
from psycopg import sql

from agentos import checks
from agentos.backups import archive, pg, restore, retention, schedule, sealed, verify
from agentos.core import database, roots, vault
from approvals.models import Approval
from kernel import artifacts, journal
from kernel.journal import request_hash
from kernel.models import Run, Step
from kernel.worker import Worker
from memory import store
from missions import demo
from missions.models import Mission, Project
from tests.live import crash_env
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)

PASSPHRASE = "correct horse battery staple"
MANAGE = str(Path(settings.BASE_DIR) / "manage.py")


@pytest.fixture(autouse=True)
def own_install(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's own data, workspaces and memory dirs: the suite's hold every other test's
    worktrees, repositories and artifacts, which each archive would carry (minutes of tar)."""
    folder = workspace.root().parent / f"test-install-{uuid.uuid4().hex[:8]}"
    workspace.make_dirs(folder / "workspaces", 0o711)
    data = folder / "data"
    data.mkdir()
    for kept in ("secret_key", vault.FILE_NAME):
        if (Path(settings.DATA_DIR) / kept).exists():
            shutil.copy2(Path(settings.DATA_DIR) / kept, data / kept)
    monkeypatch.setenv("AGENTOS_WORKSPACES_DIR", str(folder / "workspaces"))
    settings.DATA_DIR = data
    settings.MEMORY_DIR = data / "memory"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def base() -> Iterator[Path]:
    """The demo's repositories, under the workspaces dir (sandbox uids reach it)."""
    path = workspace.root() / "test-backup" / uuid.uuid4().hex[:8]
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def elsewhere() -> Iterator[Path]:
    """Another install's folders: its data dir and its workspaces dir, both new, both reachable
    by the sandbox uids (as /var/lib/agentos is, not a private tmp)."""
    path = workspace.root().parent / f"test-restore-{uuid.uuid4().hex[:8]}"
    workspace.make_dirs(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def empty_database() -> Iterator[str]:
    name = f"restore_{uuid.uuid4().hex[:8]}"
    with pg.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    yield name
    with pg.connect(autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def manage(
    *args: str, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # our own manage.py
        [sys.executable, MANAGE, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def other_install(folder: Path, database_name: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "DATABASE_URL": database.build_url(pg.entry(database_name)),
        "AGENTOS_DATA_DIR": str(folder / "data"),
        "AGENTOS_WORKSPACES_DIR": str(folder / "workspaces"),
        "AGENTOS_BACKUP_PASSPHRASE": PASSPHRASE,
    }


def old_paths_in(database_name: str, paths: list[str]) -> list[str]:
    """Each "table.column" of the database whose text holds one of `paths`."""
    found = []
    with pg.connect(database_name) as conn:
        for schema, table, column, _ in conn.execute(restore.TEXT_COLUMNS).fetchall():
            query = sql.SQL("SELECT count(*) FROM {}.{} WHERE {}::text LIKE ANY(%s)").format(
                sql.Identifier(schema), sql.Identifier(table), sql.Identifier(column)
            )
            row = conn.execute(query, [[f"%{path}/%" for path in paths]]).fetchone()
            if row and row[0]:
                found.append(f"{table}.{column}")
    return found


def reflog_count(remote: Path) -> int:
    log = workspace.host_git(remote, "reflog", "show", "main", check=False).stdout
    return len(log.splitlines())


# What the restored install runs: the owner approves the pending push, a worker runs until idle.
RESUME = """
from approvals.models import Approval
from approvals.service import decide
from kernel.models import Run
from kernel.worker import Worker
approval = Approval.objects.get(state="open")
assert approval.status == "pending", approval.status
decide(approval.pk, approve=True, args_hash=approval.request["args_hash"])
Worker(lease_seconds=30).run_until_idle()
run = Run.objects.get(pk=approval.run_id)
print("STATUS", run.status, run.workspace, run.error)
"""


def test_it_restores_a_waiting_mission_elsewhere_and_it_ends_done_with_one_push(
    seeded_catalog: None, base: Path, elsewhere: Path, empty_database: str, tmp_path: Path
) -> None:
    run = demo.ensure_demo(base)
    assert run is not None
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()
    assert run.status == "waiting", run.error
    assert Approval.objects.get(run=run).status == "pending"
    kept = artifacts.store(content=b"an artifact of the run", name="notes.txt", run=run)
    # A scope of its own: memory repositories outlive the test database's rows.
    scope = f"test-backup/{uuid.uuid4().hex[:8]}"
    store.write(
        scope, [store.Draft("Owner likes tests", "Real ones.")], author="owner", message="m"
    )
    vault.ensure()
    made = archive.create(directory=tmp_path / "backups", passphrase=PASSPHRASE)
    old_ws = str(roots.workspaces_dir())

    # The old install's repositories and worktree out of the way: the restored one must not
    # reach them (a path not re-rooted would fail, or push to the old remote).
    moved = base.with_name(base.name + "-moved")
    base.rename(moved)
    worktree = Path(run.workspace)
    worktree.rename(worktree.with_name(worktree.name + "-moved"))
    try:
        env = other_install(elsewhere, empty_database)
        done = manage("restore", str(made.path), env=env)
        assert done.returncode == 0, done.stderr
        assert f"paths under {old_ws} now under {elsewhere / 'workspaces'}" in done.stdout
        resumed = manage("shell", "-c", RESUME, env=env)
        assert resumed.returncode == 0, resumed.stderr
    finally:
        worktree.with_name(worktree.name + "-moved").rename(worktree)
        moved.rename(base)

    new_base = elsewhere / "workspaces" / base.relative_to(old_ws)
    status = resumed.stdout.split("STATUS ", 1)[1].split()
    assert status[0] == "done", resumed.stdout
    assert status[1] == str(elsewhere / "workspaces" / "worktrees" / f"run-{run.pk}")
    # Pushed once, to the restored remote: the seed push, then the agent's.
    assert reflog_count(new_base / "calc-remote.git") == 2
    assert reflog_count(base / "calc-remote.git") == 1  # the old one untouched
    fixed = workspace.host_git(new_base / "calc-remote.git", "show", "main:calc.py").stdout
    assert "return sum(values) / len(values)" in fixed
    # Settings, the vault key, the artifact and memory came along.
    data = elsewhere / "data"
    assert (data / "secret_key").read_text() == (Path(settings.DATA_DIR) / "secret_key").read_text()
    assert (data / "vault.keys").read_text() == vault.key_file().read_text()
    assert (data / "vault.keys").stat().st_mode & 0o777 == 0o600
    assert (data / "artifacts" / kept.sha256[:2] / kept.sha256[2:]).read_bytes() == (
        b"an artifact of the run"
    )
    with pg.connect(empty_database) as conn:
        notes = conn.execute(
            "SELECT n.title, s.head FROM memory_note n JOIN memory_scope s ON s.id = n.scope_id"
            " WHERE s.name = %s",
            [scope],
        ).fetchall()
        leased = conn.execute("SELECT count(*) FROM kernel_run WHERE lease_owner <> ''").fetchone()
    # No stored value names the old install's folders any more (a grep of every text column),
    # nor does a worktree's marker.
    assert old_paths_in(empty_database, [old_ws, str(settings.DATA_DIR)]) == []
    for marker in (elsewhere / "workspaces" / "worktrees").glob("*.ready"):
        assert old_ws not in marker.read_text()
    assert [title for title, _ in notes] == ["Owner likes tests"]
    assert leased == (0,)
    # The index names the commit the restored repository holds (the index is intact).
    restored_head = workspace.host_git(data / "memory" / f"{scope}.git", "rev-parse", "main")
    assert notes[0][1] == restored_head.stdout.strip()
    shutil.rmtree(Path(settings.MEMORY_DIR) / scope.split("/")[0] / f"{scope.split('/')[1]}.git")


def forge(made: Path, into: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the archive `made` with its manifest changed (we hold the passphrase)."""
    with made.open("rb") as source, into.open("wb") as out:
        sink = sealed.SealedWriter(out, PASSPHRASE)
        for entry in sealed.entries(sealed.SealedReader(source, PASSPHRASE)):
            body = entry.stream.read()
            if entry.header["name"] == "manifest":
                manifest = json.loads(body)
                change(manifest)
                body = json.dumps(manifest).encode()
            sealed.begin_entry(sink, entry.header).write(body)
            sealed.end_entry(sink)
        sealed.end_archive(sink)
        sink.close()
    return into


def test_an_interrupted_restore_is_finished_by_running_it_again(
    elsewhere: Path, empty_database: str, tmp_path: Path
) -> None:
    repository = f"{roots.workspaces_dir()}/test-backup/nowhere/calc"
    Project.objects.create(name="moved", repository=repository)
    made = archive.create(directory=tmp_path / "backups", passphrase=PASSPHRASE)
    env = other_install(elsewhere, empty_database)

    crashing = {**crash_env(tmp_path, [{"run": 0, "point": "restore_before_finish"}]), **env}
    killed = manage("restore", str(made.path), env=crashing)
    assert killed.returncode == -9, killed.stderr
    with pg.connect(empty_database) as conn:
        (stored,) = _one(conn, "SELECT repository FROM missions_project WHERE name = 'moved'")
    assert stored == repository  # restored, not re-rooted yet

    again = manage("restore", str(made.path), env=env)
    assert again.returncode == 0, again.stderr
    assert "An interrupted restore was finished" in again.stdout
    with pg.connect(empty_database) as conn:
        (stored,) = _one(conn, "SELECT repository FROM missions_project WHERE name = 'moved'")
    assert stored == f"{elsewhere}/workspaces/test-backup/nowhere/calc"
    assert not (elsewhere / "data" / restore.PENDING).exists()


def test_an_archive_of_another_version_is_refused(tmp_path: Path) -> None:
    made = archive.create(directory=tmp_path, passphrase=PASSPHRASE)

    def newer(manifest: dict[str, Any]) -> None:
        manifest["migrations"].append(["kernel", "9999_future"])

    def older(manifest: dict[str, Any]) -> None:
        manifest["migrations"].remove(["kernel", "0025_request_hash_roots"])

    with pytest.raises(restore.RestoreError, match=r"newer agentos .* kernel\.9999_future"):
        restore.restore(archive=forge(made.path, tmp_path / "a", newer), passphrase=PASSPHRASE)
    with pytest.raises(restore.RestoreError, match=r"older agentos .* kernel\.0025_request_hash"):
        restore.restore(archive=forge(made.path, tmp_path / "b", older), passphrase=PASSPHRASE)


def _one(conn: Any, query: str) -> tuple[Any, ...]:
    row = conn.execute(query).fetchone()
    assert row is not None
    return tuple(row)


def test_a_request_hash_does_not_change_with_the_roots(monkeypatch: pytest.MonkeyPatch) -> None:
    here = str(roots.workspaces_dir())
    before = request_hash("checkpoint", "workspace", {"repository": f"{here}/demo/calc"})
    monkeypatch.setenv("AGENTOS_WORKSPACES_DIR", "/srv/elsewhere")
    after = request_hash("checkpoint", "workspace", {"repository": "/srv/elsewhere/demo/calc"})
    assert before == after
    assert request_hash("checkpoint", "workspace", {"repository": "/srv/elsewhere2/x"}) != (
        request_hash("checkpoint", "workspace", {"repository": "/srv/other/x"})
    )


def test_a_killed_backup_leaves_the_previous_archive_and_no_half_archive(tmp_path: Path) -> None:
    folder = tmp_path / "backups"
    # More than the writer buffers: the kill leaves bytes written, as a large install's would.
    artifacts.store(content=os.urandom(3 * 1024 * 1024), name="big.bin")
    first = archive.create(directory=folder, passphrase=PASSPHRASE)
    digest = hashlib.sha256(first.path.read_bytes()).hexdigest()
    env = crash_env(tmp_path, [{"run": 0, "point": "backup_mid_write"}])
    env["AGENTOS_DATA_DIR"] = str(settings.DATA_DIR)
    env["AGENTOS_BACKUP_PASSPHRASE"] = PASSPHRASE
    killed = manage("backup", "--to", str(folder), env=env)

    assert killed.returncode == -9, killed.stderr
    assert archive.archives(folder) == [first.path]
    assert hashlib.sha256(first.path.read_bytes()).hexdigest() == digest
    (stale,) = folder.glob("*.partial")
    assert stale.stat().st_size > 0
    # The next backup removes the stale one.
    second = archive.create(directory=folder, passphrase=PASSPHRASE)
    assert archive.archives(folder) == [first.path, second.path]
    assert not list(folder.glob("*.partial"))


def test_verify_passes_then_names_a_tampered_record(tmp_path: Path) -> None:
    made = archive.create(directory=tmp_path, passphrase=PASSPHRASE)
    report = verify.verify(made.path, PASSPHRASE)
    assert report.ok, report.mismatches
    assert report.tables > 50
    assert report.rows > 0

    data = bytearray(made.path.read_bytes())
    data[len(data) // 2] ^= 0x01
    made.path.write_bytes(bytes(data))
    with pytest.raises(
        sealed.ArchiveError, match=r"record \d+ \(bytes \d+-\d+\) fails its AES-GCM"
    ):
        verify.verify(made.path, PASSPHRASE)


def test_verify_reports_a_table_that_differs_from_the_manifest(tmp_path: Path) -> None:
    made = archive.create(directory=tmp_path, passphrase=PASSPHRASE)

    def one_more_run(manifest: dict[str, Any]) -> None:
        manifest["tables"]["public.kernel_run"]["rows"] += 1

    forged = forge(made.path, tmp_path / f"forged{archive.SUFFIX}", one_more_run)
    os.environ["AGENTOS_BACKUP_PASSPHRASE"] = PASSPHRASE
    try:
        with pytest.raises(CommandError, match="1 mismatches"):
            call_command("backup", "--verify", str(forged), stdout=open(os.devnull, "w"))  # noqa: SIM115, PTH123
    finally:
        del os.environ["AGENTOS_BACKUP_PASSPHRASE"]


def test_a_wrong_passphrase_and_a_missing_one_are_said_precisely(tmp_path: Path) -> None:
    made = archive.create(directory=tmp_path, passphrase=PASSPHRASE)
    with pytest.raises(sealed.WrongPassphrase, match="Wrong passphrase"):
        restore.restore(archive=made.path, passphrase="not the passphrase at all")
    with pytest.raises(archive.BackupError, match="AGENTOS_BACKUP_PASSPHRASE"):
        archive.create(directory=tmp_path, passphrase="")
    with pytest.raises(archive.BackupError, match="at least 12"):
        archive.create(directory=tmp_path, passphrase="short")


@pytest.fixture
def empty_folders(settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's install moved to empty folders (its database stays: in use)."""
    folder = tmp_path / "empty"
    settings.DATA_DIR = folder / "data"
    settings.MEMORY_DIR = folder / "data" / "memory"
    monkeypatch.setenv("AGENTOS_WORKSPACES_DIR", str(folder / "workspaces"))
    return folder


def test_a_restore_onto_a_database_in_use_is_refused(tmp_path: Path, empty_folders: Path) -> None:
    made = archive.create(directory=tmp_path, passphrase=PASSPHRASE)
    with pytest.raises(
        restore.RestoreError, match=r"already holds \d+ tables: a restore goes onto"
    ):
        restore.restore(archive=made.path, passphrase=PASSPHRASE)


def test_a_restore_into_folders_in_use_is_refused(tmp_path: Path, empty_folders: Path) -> None:
    made = archive.create(directory=tmp_path / "backups", passphrase=PASSPHRASE)
    busy = empty_folders / "workspaces" / "worktrees" / "run-1"
    busy.mkdir(parents=True)
    with pytest.raises(
        restore.RestoreError, match=r"already hold an install's files: \S+/workspaces/worktrees\."
    ):
        restore.restore(archive=made.path, passphrase=PASSPHRASE)


def test_an_archive_written_inside_the_workspaces_dir_does_not_hold_itself() -> None:
    worktree = roots.workspaces_dir() / "worktrees" / "run-1"
    worktree.mkdir(parents=True)
    (worktree / "notes.txt").write_text("a run's file")
    folder = roots.workspaces_dir() / f"test-backups-{uuid.uuid4().hex[:8]}"
    (folder / "older").mkdir(parents=True)
    (folder / "older" / "kept-out.txt").write_text("an older archive's neighbour")
    try:
        made = archive.create(directory=folder, passphrase=PASSPHRASE)
        with made.path.open("rb") as source:
            for entry in sealed.entries(sealed.SealedReader(source, PASSPHRASE)):
                if entry.header["name"] == "workspaces":
                    with tarfile.open(fileobj=entry.stream, mode="r|") as tar:  # type: ignore[call-overload]  # a reader
                        names = [member.name for member in tar]
        assert "worktrees/run-1/notes.txt" in names
        assert not [name for name in names if name.startswith(folder.name)]
    finally:
        shutil.rmtree(folder)


def test_the_vault_key_is_never_in_the_archive_in_the_clear(tmp_path: Path) -> None:
    vault.ensure()
    key = vault.key_file().read_text().split()[0]
    made = archive.create(directory=tmp_path / "with", passphrase=PASSPHRASE)
    raw = made.path.read_bytes()
    assert key.encode() not in raw
    assert base64.urlsafe_b64decode(key) not in raw
    assert made.vault_key == "included"

    without = archive.create(
        directory=tmp_path / "without", passphrase=PASSPHRASE, with_vault_key=False
    )
    names = [
        entry.header["name"]
        for entry in sealed.entries(sealed.SealedReader(without.path.open("rb"), PASSPHRASE))
    ]
    assert "vault.keys" not in names
    assert any("unreadable until you enter them" in note for note in without.notes)


def test_retention_keeps_the_last_days_and_weeks() -> None:
    start = datetime(2026, 11, 1, 2, 41, tzinfo=UTC)  # a Sunday
    nightly = [start + timedelta(days=n) for n in range(36)]
    twice = start + timedelta(days=35, hours=5)  # a manual one the same day
    kept = retention.keep([*nightly, twice], daily=3, weekly=2)
    # The newest (also its day's and its ISO week's), the two days before, and the previous
    # week's newest (Sunday 29 November).
    assert kept == {twice, nightly[34], nightly[33], nightly[28]}
    assert nightly[28].date().isoformat() == "2026-11-29"
    assert retention.keep([], daily=3, weekly=2) == set()
    assert retention.keep(nightly, daily=0, weekly=0) == {nightly[-1]}


def test_prune_removes_what_retention_does_not_keep(tmp_path: Path) -> None:
    for day in range(1, 11):
        (tmp_path / f"agentos-202611{day:02d}T024100000Z{archive.SUFFIX}").write_bytes(b"x")
    (tmp_path / "unrelated.txt").write_text("kept")
    removed = schedule.prune(tmp_path, daily=2, weekly=1)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(removed) == 8
    assert left == [
        f"agentos-20261109T024100000Z{archive.SUFFIX}",
        f"agentos-20261110T024100000Z{archive.SUFFIX}",
        "unrelated.txt",
    ]


def test_the_nightly_backup_runs_when_turned_on_copies_and_prunes(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.BACKUP_NIGHTLY = False
    assert schedule.nightly() is None
    settings.BACKUP_NIGHTLY = True
    settings.BACKUP_DIR = tmp_path / "nightly"
    settings.BACKUP_COPY_TO = str(tmp_path / "copy")
    settings.BACKUP_DAILY, settings.BACKUP_WEEKLY = 1, 0
    monkeypatch.delenv(schedule.PASSPHRASE_ENV, raising=False)
    with pytest.raises(archive.BackupError, match="No passphrase"):
        schedule.nightly()
    old = f"agentos-20200101T024100000Z{archive.SUFFIX}"
    for folder in (tmp_path / "nightly", tmp_path / "copy"):
        folder.mkdir(exist_ok=True)
        (folder / old).write_bytes(b"last year's")
    monkeypatch.setenv(schedule.PASSPHRASE_ENV, PASSPHRASE)

    made = schedule.nightly()

    assert made is not None
    assert archive.archives(tmp_path / "nightly") == [made.path]
    (copied,) = archive.archives(tmp_path / "copy")
    assert copied.name == made.path.name
    assert copied.read_bytes() == made.path.read_bytes()
    assert not list((tmp_path / "copy").glob("*.partial"))


def test_a_nightly_backup_without_a_passphrase_is_a_system_check_warning(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.BACKUP_NIGHTLY = True
    monkeypatch.delenv(schedule.PASSPHRASE_ENV, raising=False)
    (warning,) = checks.check_backups(None)
    assert warning.id == "agentos.W030"
    assert "AGENTOS_BACKUP_PASSPHRASE is not set" in warning.msg
    monkeypatch.setenv(schedule.PASSPHRASE_ENV, "short")
    assert "shorter than 12" in checks.check_backups(None)[0].msg
    monkeypatch.setenv(schedule.PASSPHRASE_ENV, PASSPHRASE)
    assert checks.check_backups(None) == []
    settings.BACKUP_NIGHTLY = False
    monkeypatch.delenv(schedule.PASSPHRASE_ENV)
    assert checks.check_backups(None) == []


def test_the_upgrade_rehashes_steps_journaled_with_absolute_paths(seeded_catalog: None) -> None:
    rehash = importlib.import_module("kernel.migrations.0025_request_hash_roots").rehash
    project = Project.objects.create(name="p", repository="")
    mission = Mission.objects.create(project=project, goal="g")
    run = Run.objects.create(account=mission, program="mission")
    rooted = {"repository": f"{roots.workspaces_dir()}/demo/calc", "base": "HEAD"}
    plain = {"path": "src/a.py"}
    for seq, request in ((1, rooted), (2, plain)):
        encoded = journal._encode_for_hash(["checkpoint", "workspace", request])
        Step.objects.create(
            run=run,
            seq=seq,
            kind="checkpoint",
            effect="idempotent_write",
            name="workspace",
            request=request,
            request_hash=hashlib.sha256(encoded.encode()).hexdigest(),  # the old way
            started_at=timezone.now(),
        )
    before = dict(Step.objects.values_list("seq", "request_hash"))

    rehash(django_apps, None)

    after = dict(Step.objects.values_list("seq", "request_hash"))
    assert after[1] != before[1]
    assert after[1] == request_hash("checkpoint", "workspace", rooted)
    assert after[2] == before[2]  # no root in it: its hash was already the same
