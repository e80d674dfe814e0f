"""The kill switch over /api/v1: a script stops everything only when it says so explicitly."""

from __future__ import annotations

import pytest

from agentos.core.models import AuditEvent
from kernel.models import Run
from tests.api.conftest import Api
from tests.kernel.factories import start

pytestmark = pytest.mark.django_db


def test_a_script_stops_everything_only_when_it_confirms(api: Api) -> None:
    queued = start("chaos.noop", {"steps": 1})

    refused = api.post("/stop-everything", {"confirm": False})
    missing = api.post("/stop-everything", {})
    done = api.post("/stop-everything", {"confirm": True})

    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "confirm_required"
    assert missing.status_code == 422
    assert done.status_code == 200
    assert done.json() == {
        "runs": [queued.pk],
        "leases_revoked": 0,
        "schedules": [],
        "sandboxes": {"local": []},  # the control plane's own node, asked even when idle
        "unreachable": {},
        "tokens_revoked": True,
    }
    assert Run.objects.get(pk=queued.pk).cancel_requested
    event, sandboxes = AuditEvent.objects.filter(kind=AuditEvent.Kind.KILL_SWITCH).order_by("pk")
    assert event.username == sandboxes.username == "token:tests"
    assert sandboxes.detail["sandboxes"] == {"local": []}
