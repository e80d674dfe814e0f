"""Forking asks first: one stray tap on "Fork from here" starts nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from kernel.models import Run
from tests.console.test_pages import finished_mission, text_of

pytestmark = pytest.mark.django_db


def test_the_step_offers_a_fork_that_asks_first(owner_client: Client) -> None:
    _, run = finished_mission()

    page = text_of(owner_client.get(f"/runs/{run.pk}/"))

    assert f'href="/runs/{run.pk}/?fork=2#fork"' in page
    assert f'action="/runs/{run.pk}/fork/" class="fork-form"' not in page  # no one-tap fork


def test_it_asks_before_forking(owner_client: Client) -> None:
    _, run = finished_mission()

    page = text_of(owner_client.get(f"/runs/{run.pk}/?fork=2"))

    assert f"Fork run {run.pk} from step 2?" in page
    confirm = page.split('id="fork"', 1)[1].split("</section>", 1)[0]
    assert f'action="/runs/{run.pk}/fork/"' in confirm
    assert 'name="seq" value="2"' in confirm
    assert 'name="confirm" value="yes"' in confirm
    assert Run.objects.count() == 1


def test_a_fork_posted_without_confirmation_only_asks(owner_client: Client) -> None:
    _, run = finished_mission()

    response = owner_client.post(f"/runs/{run.pk}/fork/", {"seq": "2"})

    assert response.status_code == 200
    assert f"Fork run {run.pk} from step 2?" in text_of(response)
    assert Run.objects.count() == 1


def test_it_forks_once_confirmed(owner_client: Client) -> None:
    _, run = finished_mission()

    response = owner_client.post(f"/runs/{run.pk}/fork/", {"seq": "2", "confirm": "yes"})

    fork = Run.objects.exclude(pk=run.pk).get()
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{fork.pk}/"


def test_it_ignores_a_fork_request_for_a_step_the_run_does_not_have(owner_client: Client) -> None:
    _, run = finished_mission()

    page = text_of(owner_client.get(f"/runs/{run.pk}/?fork=99"))

    assert 'id="fork"' not in page
