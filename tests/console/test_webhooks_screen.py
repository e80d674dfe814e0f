"""The Webhooks screen through Django's client: refusals said on the form, the secret shown
once, deletion only after the confirmation, Replay refused for an accepted delivery."""

from __future__ import annotations

import pytest
from django.test import Client

from agentos.core import audit
from missions import webhooks
from missions.models import Project, Webhook, WebhookDelivery

pytestmark = pytest.mark.django_db


def form(project: Project, **changes: str) -> dict[str, str]:
    return {
        "name": "deploys",
        "preset": "agentos",
        "project": str(project.pk),
        "goal": "Check the deployment.",
        "definition_of_done": "",
        "risk_class": "research",
        **changes,
    }


def test_it_shows_the_secret_once_and_says_what_is_wrong(owner_client: Client) -> None:
    project = Project.objects.create(name="site")

    refused = owner_client.post("/webhooks/", form(project, goal="", preset="gitlab"))
    assert refused.status_code == 400
    assert "This field is required." in refused.content.decode()
    assert "Select a valid choice." in refused.content.decode()
    assert not Webhook.objects.exists()

    created = owner_client.post("/webhooks/", form(project))
    assert created.status_code == 200
    webhook = Webhook.objects.get()
    secret = webhooks._secret(webhook)
    assert secret in created.content.decode()
    assert f"/hooks/{webhook.key}" in created.content.decode()
    again = owner_client.get("/webhooks/")
    assert secret not in again.content.decode()
    assert "deploys" in again.content.decode()
    assert webhook.mission == {
        "project_id": project.pk,
        "goal": "Check the deployment.",
        "risk_class": "research",
    }


def test_it_deletes_only_once_confirmed(owner_client: Client) -> None:
    project = Project.objects.create(name="site")
    webhook = webhooks.create(
        name="x",
        mission={"project_id": project.pk, "goal": "g"},
        actor=audit.Actor.command("test"),
    ).webhook

    asked = owner_client.post(f"/webhooks/{webhook.pk}/delete")
    assert asked.status_code == 302
    assert asked["Location"].endswith("?confirm=delete#delete")
    assert Webhook.objects.exists()
    page = owner_client.get(asked["Location"])
    assert "Delete this webhook?" in page.content.decode()

    done = owner_client.post(f"/webhooks/{webhook.pk}/delete", {"confirm": "yes"})
    assert done.status_code == 302
    assert not Webhook.objects.exists()


def test_replay_is_refused_for_an_accepted_delivery(owner_client: Client) -> None:
    project = Project.objects.create(name="site")
    webhook = webhooks.create(
        name="x",
        mission={"project_id": project.pk, "goal": "g"},
        actor=audit.Actor.command("test"),
    ).webhook
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, delivery_id="d", signature="0" * 64, body=b"{}", status="accepted"
    )

    answer = owner_client.post(f"/webhooks/{webhook.pk}/deliveries/{delivery.pk}/replay")

    assert answer.status_code == 409
    assert "Only a failed delivery is replayed." in answer.content.decode()


def test_the_screen_needs_the_owner(client: Client) -> None:
    assert client.get("/webhooks/").status_code == 302
