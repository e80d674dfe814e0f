"""HTTP from the control plane on a run's behalf goes through the run's egress socket: the
run's allow-list decides, and a bridge adds a key our client never holds."""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings

from cluster import outbound
from kernel.models import Event
from missions import keys
from tests.cluster.egress_fixtures import Upstream
from tests.cluster.test_egress import make_run
from tests.providers.wire import Json, WireServer

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-ant-outbound-canary-" + "k" * 24


def test_it_reaches_only_the_runs_hosts_and_journals_each_request(
    service: object, upstream: Upstream, elsewhere: Upstream
) -> None:
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    with outbound.client(run.pk, seconds=10) as http:
        answer = http.get(f"http://127.0.0.1:{upstream.port}/page")
        assert answer.status_code == 200
        assert answer.text == "hello from /page\n"
        refused = http.get(f"http://127.0.0.1:{elsewhere.port}/page")
        assert refused.status_code == 403
    kinds = list(Event.objects.filter(run=run).values_list("kind", flat=True).order_by("id"))
    assert kinds == ["egress.allowed", "egress.refused"]
    assert elsewhere.seen == []


def test_a_bridge_adds_the_key_and_the_client_never_holds_it(
    service: object, provider: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(settings.EGRESS_BRIDGE_URLS, "anthropic", provider.url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    keys.put("anthropic", KEY)
    run = make_run(hosts=[])
    provider.queue(Json({"ok": True}))
    with outbound.client(run.pk, seconds=10, scopes=["bridge:anthropic"]) as http:
        answer = http.post("http://anthropic.bridge/v1/messages", json={"model": "m"})
        assert KEY not in repr(http.headers) + repr(http._transport.__dict__)
    assert answer.status_code == 200, answer.text
    assert provider.received[-1].headers["x-api-key"] == KEY


def test_without_the_service_it_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("AGENTOS_EGRESS_DIR", "/nonexistent/agentos-egress")
    run = make_run(hosts=["example.org"])
    with pytest.raises(outbound.Unavailable, match="egress service does not answer"):
        outbound.client(run.pk, seconds=5)


def test_the_async_client_goes_the_same_way(service: object, upstream: Upstream) -> None:
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    http = outbound.async_client(run.pk, seconds=10)

    async def fetch() -> str:
        async with http:
            answer = await http.get(f"http://127.0.0.1:{upstream.port}/async")
            return answer.text

    assert asyncio.run(fetch()) == "hello from /async\n"
    assert Event.objects.filter(run=run, kind="egress.allowed").count() == 1
