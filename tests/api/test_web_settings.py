"""The Web search backend over /api/v1/settings/web and from the Settings page: set, read,
removed, each change in the security log; a bad URL or bridge refused precisely, nothing
written."""

from __future__ import annotations

import pytest
from django.test import Client

from agentos.core.models import AuditEvent
from missions import search
from missions.models import SearchBackend
from tests.agentos.test_api import error_of
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db


def test_it_sets_reads_and_removes_the_search_backend(api: Api) -> None:
    assert api.get("/settings/web").json() == {"search": None}

    saved = api.put(
        "/settings/web", {"search": {"kind": "searxng", "url": "http://127.0.0.1:8888/"}}
    )

    assert saved.status_code == 200
    assert saved.json() == {
        "search": {"kind": "searxng", "url": "http://127.0.0.1:8888", "bridge": ""}
    }
    assert api.get("/settings/web").json() == saved.json()
    bridged = {"kind": "api", "url": "https://api.search.example/v1/web", "bridge": "brave"}
    assert api.put("/settings/web", {"search": bridged}).json() == {"search": bridged}
    assert SearchBackend.objects.count() == 1
    assert api.put("/settings/web", {"search": None}).json() == {"search": None}
    assert search.get() is None
    logged = AuditEvent.objects.filter(kind=AuditEvent.Kind.PROVIDER_CHANGED).order_by("id")
    assert [(e.detail["provider"], e.detail["change"]) for e in logged] == [
        ("web search", "searxng backend set"),
        ("web search", "api backend set"),
        ("web search", "backend removed"),
    ]


@pytest.mark.parametrize(
    ("search_in", "said"),
    [
        ({"kind": "searxng", "url": "ftp://search.example"}, "starts with http:// or https://"),
        (
            {"kind": "searxng", "url": "http://u:p@search.example"},
            "Put no user or password in the URL",
        ),
        ({"kind": "searxng", "url": "http://search.example:port"}, "This is not a URL."),
        ({"kind": "searxng", "url": "   "}, "needs a base URL"),
        ({"kind": "api", "url": "https://api.example"}, "needs the name of the egress bridge"),
        ({"kind": "api", "url": "https://api.example", "bridge": "Bad Name"}, "egress bridge"),
        ({"kind": "searxng", "url": "http://s.example", "bridge": "b"}, "takes no bridge"),
    ],
)
def test_a_bad_backend_is_refused_precisely_and_nothing_is_written(
    api: Api, search_in: dict[str, str], said: str
) -> None:
    response = api.put("/settings/web", {"search": search_in})

    assert response.status_code == 400
    assert said in str(error_of(response)["message"])
    assert not SearchBackend.objects.exists()
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.PROVIDER_CHANGED).exists()


def test_an_unknown_kind_is_refused_by_the_schema(api: Api) -> None:
    response = api.put("/settings/web", {"search": {"kind": "google", "url": "http://x.example"}})
    assert response.status_code in (400, 422)
    assert not SearchBackend.objects.exists()


def test_the_settings_page_sets_and_shows_the_backend(owner_client: Client) -> None:
    page = owner_client.get("/settings/")
    assert 'id="web"' in page.content.decode()

    saved = owner_client.post(
        "/settings/web-search/", {"kind": "searxng", "url": "http://127.0.0.1:8888", "bridge": ""}
    )
    assert saved.status_code == 302
    shown = owner_client.get(saved["Location"]).content.decode()
    assert "<code>http://127.0.0.1:8888</code>" in shown
    refused = owner_client.post(
        "/settings/web-search/", {"kind": "searxng", "url": "nope"}, follow=True
    )
    assert "Web search not saved: The base URL starts with http:// or https://" in (
        refused.content.decode()
    )
    assert search.get() == search.Backend("searxng", "http://127.0.0.1:8888")
    owner_client.post("/settings/web-search/", {"action": "remove"})
    assert search.get() is None
