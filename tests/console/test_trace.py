"""A run's trace: each journaled step as a bar on the run's time line, with its cost; drawn with
SVG attributes (the console's CSP forbids inline styles)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from kernel.models import Run, RunStatus, Step
from tests.agentos.test_pages import INLINE_HANDLER, INLINE_SCRIPT, INLINE_STYLE, assert_strict_csp
from tests.kernel.factories import make_mission, start

pytestmark = pytest.mark.django_db


def step(
    run: Run, seq: int, kind: str, began: float, lasted: float | None, **extra: object
) -> None:
    t0 = run.started_at
    assert t0 is not None
    Step.objects.create(
        run=run, seq=seq, kind=kind, effect="read", name=f"{kind}-{seq}", request={},
        request_hash="", idempotency_key="", started_at=t0 + timedelta(seconds=began),
        finished_at=None if lasted is None else t0 + timedelta(seconds=began + lasted),
        settled_by="executed" if lasted is not None else "", **extra,
    )  # fmt: skip


def test_it_draws_each_step_on_the_runs_time_line(owner_client: Client) -> None:
    run = start("agent", account=make_mission())
    t0 = timezone.now() - timedelta(seconds=10)
    Run.objects.filter(pk=run.pk).update(
        started_at=t0, finished_at=t0 + timedelta(seconds=10), status=RunStatus.DONE
    )
    run.refresh_from_db()
    step(run, 1, "model_call", 0, 2, usd_micros=1500, input_tokens=900, output_tokens=40)
    step(run, 2, "tool_call", 5, 2.5, result={"is_error": True, "output": "no such file"})

    response = owner_client.get(f"/runs/{run.pk}/trace/")

    content = response.content.decode()
    assert response.status_code == 200
    assert_strict_csp(response)
    for inline in (INLINE_STYLE, INLINE_SCRIPT, INLINE_HANDLER):
        assert not inline.search(response.content)
    bars = re.findall(r'<rect x="([\d.]+)" y="0" width="([\d.]+)"', content)
    assert bars == [("0.000", "20.000"), ("50.000", "25.000")]
    assert "trace-error" in content
    assert "2.000 s" in content
    assert f'href="/runs/{run.pk}/trace/"' in owner_client.get(f"/runs/{run.pk}/").content.decode()


def test_a_step_under_way_runs_to_now(owner_client: Client) -> None:
    run = start("agent", account=make_mission())
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - timedelta(seconds=4))
    run.refresh_from_db()
    step(run, 1, "model_call", 1, None)

    content = owner_client.get(f"/runs/{run.pk}/trace/").content.decode()

    assert "trace-open" in content
    assert "under way" in content
    assert owner_client.get("/runs/999999/trace/").status_code == 404
