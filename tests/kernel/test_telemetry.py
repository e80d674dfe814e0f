"""A span per step with the gen_ai.* attributes, checked with an in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.test import override_settings
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kernel import runs, telemetry
from kernel.models import Step
from kernel.worker import Worker
from tests.kernel.factories import make_mission

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry.use(SimpleSpanProcessor(exporter))
    yield exporter
    telemetry.use(None)


def test_each_step_emits_a_span_with_gen_ai_attributes(
    spans: InMemorySpanExporter, seeded_catalog: None
) -> None:
    usage = {"input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 50}
    run = runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "Call noop, then answer.",
            "provider": "scripted",
            "model": "scripted",
            "tools": ["noop"],
            "script": {
                "turns": [
                    {"tool_calls": [{"name": "noop", "arguments": {}}], "usage": usage},
                    {"text": "Done.", "usage": usage},
                ]
            },
        },
    )
    Worker(lease_seconds=30).run_until_idle()

    finished = spans.get_finished_spans()
    assert len(finished) == Step.objects.filter(run=run).count()
    by_name = {span.name: span for span in finished}
    chat = by_name["chat scripted"]
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "scripted"
    assert attributes["gen_ai.request.model"] == "scripted"
    assert attributes["gen_ai.usage.input_tokens"] == 120
    assert attributes["gen_ai.usage.output_tokens"] == 30
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 50
    assert attributes["agentos.run.id"] == run.pk
    assert attributes["agentos.mission.id"] == run.account_id
    assert attributes["agentos.run.parent_id"] == 0
    tool = dict(by_name["execute_tool noop"].attributes or {})
    assert tool["gen_ai.tool.name"] == "noop"
    assert tool["agentos.step.seq"] == 3
    # One trace per run tree, whichever worker wrote the step.
    assert len({span.context.trace_id for span in finished}) == 1
    assert all(span.end_time >= span.start_time for span in finished)  # type: ignore[operator]


def test_telemetry_is_off_by_default() -> None:
    telemetry.use(None)
    assert telemetry.tracer() is None


def test_an_unknown_exporter_is_reported_by_the_checks() -> None:
    with override_settings(OTEL_EXPORTER="zipkin"), pytest.raises(Exception, match="E007"):
        call_command("check")
