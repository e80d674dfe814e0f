"""The nightly backup (`agentos.tasks.nightly_backup`): an archive when the owner turned it on,
then the retention of `retention.keep` in the backup folder and in the copy folder."""

from __future__ import annotations

import os
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings

from agentos.backups import archive, retention

NAME = re.compile(r"^agentos-(\d{8}T\d{6})(\d{3})Z" + re.escape(archive.SUFFIX) + "$")
PASSPHRASE_ENV = "AGENTOS_BACKUP_PASSPHRASE"  # noqa: S105  # a variable's name, not its value


def stamp_of(path: Path) -> datetime | None:
    found = NAME.match(path.name)
    if found is None:
        return None
    stamp = datetime.strptime(found[1], "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    return stamp.replace(microsecond=int(found[2]) * 1000)


def prune(directory: Path, *, daily: int, weekly: int) -> list[Path]:
    """The archives of `directory` that retention does not keep, removed; those removed."""
    dated = {stamp: path for path in archive.archives(directory) if (stamp := stamp_of(path))}
    kept = retention.keep(list(dated), daily=daily, weekly=weekly)
    removed = [path for stamp, path in sorted(dated.items()) if stamp not in kept]
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def copy(path: Path, folder: Path) -> Path:
    """`path` into `folder`, whole or not at all (partial name, fsync, rename)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = folder / path.name
    partial = target.with_name(target.name + archive.PARTIAL)
    with path.open("rb") as source, partial.open("wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())
    partial.rename(target)
    return target


def nightly() -> archive.Made | None:
    if not settings.BACKUP_NIGHTLY:
        return None
    made = archive.create(
        directory=Path(settings.BACKUP_DIR),
        passphrase=archive.check_passphrase(os.environ.get(PASSPHRASE_ENV)),
    )
    daily, weekly = settings.BACKUP_DAILY, settings.BACKUP_WEEKLY
    prune(Path(settings.BACKUP_DIR), daily=daily, weekly=weekly)
    if settings.BACKUP_COPY_TO:
        folder = Path(settings.BACKUP_COPY_TO)
        copy(made.path, folder)
        prune(folder, daily=daily, weekly=weekly)
    return made
