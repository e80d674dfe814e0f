"""A run parked as "needs migration" is listed in the API, shown on Home and on its page, and
each owner action (restart on this engine, fork, stop) works from the API and the console."""

from __future__ import annotations

import pytest
from django.test import Client

from kernel import programs
from kernel.models import Run, RunStatus
from kernel.worker import Worker
from tests.api.conftest import Api
from tests.kernel import test_versions  # registers the "test.versions.*" programs
from tests.kernel.factories import start

pytestmark = pytest.mark.django_db(transaction=True)


def work() -> list[str]:
    return Worker(lease_seconds=30).run_until_idle()


@pytest.fixture
def parked(monkeypatch: pytest.MonkeyPatch) -> Run:
    """A run started on engine 1, in flight, then found by a worker of version 2."""
    run = test_versions.in_flight("test.versions.strict")
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    test_versions.answer(run)
    assert work() == []
    run.refresh_from_db()
    assert run.needs_migration
    return run


def test_it_lists_a_parked_run_in_the_api(api: Api, parked: Run) -> None:
    queued = start("chaos.noop")  # unfinished, not parked

    listed = api.get("/runs", {"needs_migration": "true"}).json()
    unfinished = api.get("/runs").json()

    assert [(run["id"], run["needs_migration"], run["engine_version"]) for run in listed] == [
        (parked.pk, True, "1")
    ]
    assert {run["id"] for run in unfinished} == {parked.pk, queued.pk}
    assert api.get(f"/runs/{parked.pk}").json()["needs_migration"] is True


def test_it_restarts_a_parked_run_from_the_api(api: Api, parked: Run) -> None:
    response = api.post(f"/runs/{parked.pk}/restart", key="restart-1")
    again = api.post(f"/runs/{parked.pk}/restart", key="restart-1")

    assert response.status_code == 201, response.content
    fresh = response.json()
    assert again.json() == fresh  # the same Idempotency-Key: one restart
    assert (fresh["engine_version"], fresh["contract"]["forked_from"]) == (
        "2",
        {"run": parked.pk, "seq": 1},
    )
    assert sorted(work()) == ["cancelled", "waiting"]
    assert api.get("/runs", {"needs_migration": "true"}).json() == []
    refused = api.post(f"/runs/{parked.pk}/restart")
    assert refused.status_code == 409


def test_it_stops_and_forks_a_parked_run_from_the_api(api: Api, parked: Run) -> None:
    fork = api.post(f"/runs/{parked.pk}/fork", {"at_seq": 1})
    stop = api.post(f"/runs/{parked.pk}/stop")

    assert fork.status_code == 201
    assert fork.json()["engine_version"] == "2"
    assert stop.status_code == 200
    assert sorted(work()) == ["cancelled", "waiting"]
    assert Run.objects.get(pk=parked.pk).status == RunStatus.CANCELLED


def test_it_shows_a_parked_run_on_home_and_its_page_and_restarts_it_there(
    owner_client: Client, parked: Run
) -> None:
    home = owner_client.get("/").content.decode()
    page = owner_client.get(f"/runs/{parked.pk}/").content.decode()

    assert f'href="/runs/{parked.pk}/"' in home
    assert "Needs migration" in home
    assert 'id="needs-migration"' in page
    assert "Restart from step 1 on this engine" in page
    assert f'action="/runs/{parked.pk}/restart/"' in page

    response = owner_client.post(f"/runs/{parked.pk}/restart/")

    fresh = Run.objects.exclude(pk=parked.pk).get(account=parked.account)
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{fresh.pk}/"
    assert fresh.engine_version == "2"
    assert Run.objects.get(pk=parked.pk).cancel_requested
    assert 'id="needs-migration"' not in owner_client.get(f"/runs/{parked.pk}/").content.decode()
