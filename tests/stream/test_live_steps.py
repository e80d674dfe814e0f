"""The steps the event stream pushes to the run pages watching them (`run_views.live_steps`):
rendered as the timeline renders them, in a fixed number of queries whatever their count."""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string
from pytest_django import DjangoAssertNumQueries

from kernel.models import Run
from kernel.worker import Worker
from missions import run_views, timeline
from tests.kernel.factories import start
from tests.stream import programs  # noqa: F401  # registers the programs

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_renders_each_step_as_the_timeline_does_in_two_queries(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    first = start("test.stream.story", {"steps": 2})
    second = start("test.stream.story", {"steps": 1})
    Worker(lease_seconds=30).run_until_idle()
    wanted = [(first.pk, 1), (first.pk, 2), (second.pk, 3), (first.pk, 4), (second.pk, 99)]

    with django_assert_num_queries(2):
        shown = run_views.live_steps(wanted)

    assert [(run_id, seq) for run_id, seq, _html in shown] == wanted[:4]  # 99 does not exist
    run = Run.objects.get(pk=first.pk)
    (entry,) = [e for e in timeline.timeline(run).entries if e.step.seq == 2]
    expected = render_to_string("missions/step.html", {"e": entry, "run": run, "fork_gone": False})
    assert shown[1][2] == expected


def test_it_reads_the_question_of_a_step_that_asks_the_owner() -> None:
    run = start("test.stream.story", {"ask": True})
    Worker(lease_seconds=30).run_until_idle()

    ((_run, _seq, html),) = run_views.live_steps([(run.pk, 3)])

    assert 'id="step-3"' in html
    assert "Go on?" in html
