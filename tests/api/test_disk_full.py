"""When PostgreSQL's disk is full, a new mission is refused with a precise 507 (API) or page
(console), "The disk is full: …", and nothing of it is written; once space is freed, the same
request (same Idempotency-Key) goes through.

The full disk is a real one: the missions table moved to a tablespace on a tiny tmpfs (root
only), filled to the last byte, so PostgreSQL itself answers `could not extend file … No space
left on device` (SQLSTATE 53100).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from kernel.models import Run
from missions.models import Mission
from tests.api.conftest import Api
from tests.api.factories import make_project
from tests.disks import fill, needs_root, tiny_disk

pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_root,
    pytest.mark.skipif("DATABASE_URL" in os.environ, reason="needs the embedded server's disk"),
]

TABLESPACE = "agentos_tiny_disk"


@contextlib.contextmanager
def missions_on_a_full_disk() -> Iterator[Path]:
    """The missions table on a tablespace whose disk is full; put back on the way out. Yields
    the file that fills the disk (remove it to free space)."""
    mount = Path(tempfile.mkdtemp(prefix="agentos-tiny-disk-"))
    mount.chmod(0o755)
    # A tablespace's directory belongs to the server's user (pgserver's, when run as root).
    server_uid = (Path(settings.DATA_DIR) / "pg" / "PG_VERSION").stat().st_uid
    with (
        tiny_disk(mount, size="512k", options=f"uid={server_uid},mode=0700") as disk,
        connection.cursor() as cursor,
    ):
        cursor.execute(f"CREATE TABLESPACE {TABLESPACE} LOCATION %s", [str(disk)])
        try:
            # Empty, so that the next row needs a new page: the file must grow.
            cursor.execute("TRUNCATE missions_mission CASCADE")
            cursor.execute(f"ALTER TABLE missions_mission SET TABLESPACE {TABLESPACE}")
            yield fill(disk)
        finally:
            cursor.execute("ALTER TABLE missions_mission SET TABLESPACE pg_default")
            cursor.execute(f"DROP TABLESPACE {TABLESPACE}")
    mount.rmdir()


@pytest.fixture
def with_key(monkeypatch: pytest.MonkeyPatch, seeded_catalog: None) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


def test_a_new_mission_is_refused_with_507_and_nothing_written(api: Api, with_key: None) -> None:
    project = make_project()
    body = {"project_id": project.pk, "goal": "Write the notes."}
    with missions_on_a_full_disk() as filler:
        refused = api.post("/missions", body, key="notes-1")

        assert refused.status_code == 507, refused.content
        error = refused.json()["error"]
        assert error["code"] == "disk_full"
        assert error["message"].startswith("The disk is full: ")
        assert Mission.objects.count() == Run.objects.count() == 0  # nothing half-written

        filler.unlink()  # the owner frees space
        accepted = api.post("/missions", body, key="notes-1")

    assert accepted.status_code == 201, accepted.content
    assert "Idempotent-Replayed" not in accepted  # the refusal was not kept as the answer
    assert Mission.objects.count() == Run.objects.count() == 1


def test_the_console_says_the_disk_is_full(owner_client: Client, with_key: None) -> None:
    project = make_project()
    with missions_on_a_full_disk():
        response = owner_client.post(
            "/missions/new/", {"project": project.pk, "goal": "Write the notes.", "offline": ""}
        )

    assert response.status_code == 507
    html = response.content.decode()
    assert "The disk is full: " in html
    assert 'class="topbar"' in html
    assert Mission.objects.count() == 0
