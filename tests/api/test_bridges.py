"""The owner's API bridges over /api/v1: added with a key never shown again, changed, listed,
removed, each act in the security log; bad input is refused whole."""

from __future__ import annotations

import pytest

from agentos.core.models import AuditEvent
from cluster.models import ApiBridge
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db

KEY = "bridge-api-canary-" + "b" * 20


def test_a_bridge_is_added_changed_listed_and_removed(api: Api) -> None:
    added = api.put("/bridges/search", {"base_url": "https://search.example.org", "secret": KEY})
    assert added.status_code == 201, added.json()
    assert added.json()["hint"] == "…bbbb"
    assert KEY not in added.content.decode()
    changed = api.put(
        "/bridges/search",
        {"base_url": "https://search.example.org/v2", "template": "Token {secret}"},
    )
    assert changed.status_code == 200
    listed = api.get("/bridges").json()
    assert [(b["name"], b["base_url"], b["template"]) for b in listed] == [
        ("search", "https://search.example.org/v2", "Token {secret}")
    ]
    assert KEY not in api.get("/bridges").content.decode()
    assert api.delete("/bridges/search").status_code == 204
    assert api.delete("/bridges/search").status_code == 404
    changes = AuditEvent.objects.filter(kind="bridge.changed").order_by("id")
    assert [e.detail["change"] for e in changes] == ["added", "changed", "removed"]
    assert changes[0].username  # who acted


@pytest.mark.parametrize(
    ("name", "body", "status"),
    [
        ("search", {"base_url": "https://x.example.org"}, 400),  # no key for a new bridge
        ("search", {"base_url": "file:///etc/passwd", "secret": KEY}, 400),
        ("Search", {"base_url": "https://x.example.org", "secret": KEY}, 400),
        ("git", {"base_url": "https://x.example.org", "secret": KEY}, 409),
        ("search", {"base_url": "https://x.example.org", "secret": KEY, "extra": 1}, 422),
        ("search", {"base_url": "https://x.example.org", "secret": KEY, "header": "A: b"}, 400),
    ],
)
def test_bad_bridges_are_refused_precisely(
    api: Api, name: str, body: dict[str, object], status: int
) -> None:
    response = api.put(f"/bridges/{name}", body)
    assert response.status_code == status, response.json()
    assert not ApiBridge.objects.exists()
