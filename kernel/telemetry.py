"""OpenTelemetry: one span per journaled step, with the `gen_ai.*` attributes of the GenAI
semantic conventions. This module is the only place that knows those names, so a convention
change is a change here. The events table stays the reference; spans are for the owner's tools.

Exporter chosen by `AGENTOS_OTEL_EXPORTER`: `none` (default: nothing is created, not even a
span), `otlp` (OTLP over HTTP; endpoint and headers from the standard `OTEL_EXPORTER_OTLP_*`
variables), or `console` (spans printed, for a look by hand).

Every step of a run tree shares one trace (its id derived from the root run), under a parent
standing for its run (derived from the run id): the spans of a run written by several workers,
before and after a crash, land in the same place without any context passed around.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from kernel.budgets import Cost
from kernel.models import Run

EXPORTERS = ("none", "otlp", "console")
OPERATIONS = {"model_call": "chat", "compaction": "chat", "tool_call": "execute_tool"}

_tracer: trace.Tracer | None = None
_configured = False


def tracer() -> trace.Tracer | None:
    """The tracer, or None when telemetry is off (the default): then nothing is built."""
    global _tracer, _configured
    if not _configured:
        _configured = True
        exporter = _exporter(settings.OTEL_EXPORTER)
        if exporter is not None:
            processor: SpanProcessor = (
                SimpleSpanProcessor(exporter)
                if settings.OTEL_EXPORTER == "console"
                else BatchSpanProcessor(exporter)
            )
            _tracer = _provider(processor).get_tracer("agentos.kernel")
    return _tracer


def use(processor: SpanProcessor | None) -> None:
    """Send spans to `processor` (tests: an in-memory exporter), or turn telemetry off."""
    global _tracer, _configured
    _configured = True
    _tracer = _provider(processor).get_tracer("agentos.kernel") if processor else None


def _provider(processor: SpanProcessor) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "agentos"}))
    provider.add_span_processor(processor)
    return provider


def _exporter(name: str) -> SpanExporter | None:
    if name == "otlp":
        # Imported here: slow to import (protobuf, requests), and only this exporter needs it.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if name == "console":
        return ConsoleSpanExporter()
    return None


def _id(bits: int, *parts: object) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1


def step(
    run: Run,
    *,
    seq: int,
    kind: str,
    name: str,
    started_ns: int,
    ended_ns: int,
    cost: Cost,
    result: Any,
    settled_by: str,
) -> None:
    """Emit the span of one finished step (a no-op when telemetry is off)."""
    active = tracer()
    if active is None:
        return
    operation = OPERATIONS.get(kind, kind)
    spec = run.input if isinstance(run.input, dict) else {}
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "agentos.mission.id": run.account_id,
        "agentos.run.id": run.pk,
        "agentos.run.parent_id": run.parent_id or 0,
        "agentos.run.root_id": run.root_id or run.pk,
        "agentos.step.seq": seq,
        "agentos.step.kind": kind,
        "agentos.step.settled_by": settled_by,
        "agentos.cost.usd_micros": cost.usd_micros,
    }
    if operation == "chat":
        attributes |= {
            "gen_ai.provider.name": str(spec.get("provider", "")),
            "gen_ai.request.model": name,
            "gen_ai.usage.input_tokens": cost.input_tokens,
            "gen_ai.usage.output_tokens": cost.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": cost.cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": cost.cache_write_tokens,
        }
        if isinstance(result, dict) and result.get("stop_reason"):
            attributes["gen_ai.response.finish_reasons"] = [str(result["stop_reason"])]
        span_name = f"{operation} {name}"
    elif operation == "execute_tool":
        attributes["gen_ai.tool.name"] = name
        if isinstance(result, dict) and result.get("is_error"):
            attributes["error.type"] = "tool_error"
        span_name = f"execute_tool {name}"
    else:
        span_name = f"{kind} {name}".strip()
    root = run.root_id or run.pk
    parent = SpanContext(
        trace_id=_id(128, "trace", root),
        span_id=_id(64, "run", run.pk),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    span = active.start_span(
        span_name,
        context=trace.set_span_in_context(NonRecordingSpan(parent)),
        kind=SpanKind.CLIENT if operation == "chat" else SpanKind.INTERNAL,
        attributes=attributes,
        start_time=started_ns,
    )
    span.end(end_time=ended_ns)
