"""`manage.py backup --verify`: an archive proven restorable. Its database is restored into a
scratch database on the same server (dropped after), each table's row count and checksum is
compared with the manifest's, and every artifact's content with the hash that names it."""

from __future__ import annotations

import hashlib
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentos.backups import pg
from agentos.backups.restore import restore_database
from agentos.backups.sealed import SealedReader, entries


@dataclass
class Verified:
    archive: Path
    tables: int = 0
    rows: int = 0
    artifacts: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


def verify(archive: Path, passphrase: str) -> Verified:
    report = Verified(archive)
    manifest: dict[str, Any] = {}
    with pg.scratch_database() as scratch, archive.open("rb") as source:
        for entry in entries(SealedReader(source, passphrase)):
            name = entry.header["name"]
            if name == "manifest":
                manifest = json.loads(entry.stream.read())
            elif name == "database":
                restore_database(entry, scratch)
            elif name == "artifacts":
                report.artifacts = _check_artifacts(entry.stream, report.mismatches)
        with pg.connect(scratch) as conn:
            restored = pg.checksums(conn)
    expected: dict[str, dict[str, Any]] = manifest.get("tables", {})
    report.tables = len(expected)
    report.rows = sum(t["rows"] for t in expected.values())
    for table in sorted(expected.keys() | restored.keys()):
        want, got = expected.get(table), restored.get(table)
        if want is None or got is None:
            report.mismatches.append(
                f"{table}: in the {'restore' if want is None else 'manifest'} only"
            )
        elif want != got:
            report.mismatches.append(
                f"{table}: {want['rows']} rows (md5 {want['md5'][:12]}) in the manifest,"
                f" {got['rows']} rows (md5 {got['md5'][:12]}) restored"
            )
    return report


def _check_artifacts(stream: Any, mismatches: list[str]) -> int:
    count = 0
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            handle, digest_of = tar.extractfile(member), hashlib.sha256()
            while handle is not None and (block := handle.read(1 << 20)):
                digest_of.update(block)
            digest = digest_of.hexdigest()
            named = member.name.replace("/", "")
            if digest != named:
                mismatches.append(f"artifact {member.name}: its content hashes to {digest[:12]}")
            count += 1
    return count
