"""A mission's state is its outcome: done once a root run ended done, whatever its forks did."""

from __future__ import annotations

import pytest
from django.test import Client

from kernel import runs
from kernel.models import RunStatus
from missions import overview
from tests.console.factories import work
from tests.console.test_pages import finished_mission

pytestmark = pytest.mark.django_db


def test_a_mission_stays_done_when_a_later_fork_is_cancelled(owner_client: Client) -> None:
    mission, run = finished_mission()
    fork = runs.fork_run(run.pk, at_seq=2)
    runs.request_stop(fork.pk)
    assert work() == ["cancelled"]

    (row,) = [row for row in overview.missions() if row.mission.pk == mission.pk]

    assert row.state is not None
    assert row.state.value == RunStatus.DONE
    content = owner_client.get("/missions/").content.decode()
    assert '<span class="status status-up">done</span>' in content


def test_a_mission_without_a_done_run_shows_its_latest_run() -> None:
    mission, run = finished_mission()
    fork = runs.fork_run(run.pk, at_seq=2)
    runs.pause_run(fork.pk)
    run.__class__.objects.filter(pk=run.pk).update(status=RunStatus.FAILED)

    (row,) = [row for row in overview.missions() if row.mission.pk == mission.pk]

    assert row.state is not None
    assert row.state.value == "paused"
