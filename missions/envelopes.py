"""A sub-agent's result envelope: what it must end with (the stop hook `envelope` holds it to
one), and what its parent reads of it once it ended (`envelope_of`): its own envelope when it
ended `done`, else one its run's status and record speak for."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from django.utils import timezone

from kernel.models import Run, RunStatus

HOOK = "envelope"
# What a child may say of itself; `budget_exhausted` and `cancelled` are the kernel's to say.
OWN_STATUSES = ("done", "partial", "failed", "blocked")
STATUSES = (*OWN_STATUSES, "budget_exhausted", "cancelled")
DEFAULT_OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}

ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"enum": list(OWN_STATUSES)},
        "payload": {"type": "object"},
        "artifacts": {"type": "array", "items": {"type": "string"}},
        "evidence": {
            "type": "object",
            "properties": {
                key: {"type": "array", "items": {"type": "string"}}
                for key in ("commands", "tests", "sources")
            },
            "additionalProperties": False,
        },
        "open_questions": {"type": "array", "items": {"type": "string"}},
        "error": {"type": "string"},
    },
    "required": ["status", "payload"],
    "additionalProperties": False,
}
_ENVELOPE_VALIDATOR = jsonschema.Draft202012Validator(ENVELOPE_SCHEMA)


def parse_envelope(text: str, contract: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
    """A child's final answer as its result envelope, or (None, what is wrong with it)."""
    found = _json_object(text)
    if found is None:
        return None, "it is not a JSON object"
    error = _first_error(_ENVELOPE_VALIDATOR, found)
    if error:
        return None, f"the envelope is not valid: {error}"
    if found["status"] == "done":
        schema = (contract or {}).get("output_schema") or DEFAULT_OUTPUT_SCHEMA
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = _first_error(validator, found["payload"], at="payload")
        if error:
            return None, f"the payload does not match its schema: {error}"
    elif not str(found.get("error", "")).strip():
        return None, f"a {found['status']} envelope needs an error saying what is missing or wrong"
    evidence = found.get("evidence", {})
    return {
        "status": found["status"],
        "payload": found["payload"],
        "artifacts": found.get("artifacts", []),
        "evidence": {key: evidence.get(key, []) for key in ("commands", "tests", "sources")},
        "open_questions": found.get("open_questions", []),
        **({"error": found["error"]} if found.get("error") else {}),
    }, ""


def _json_object(text: str) -> dict[str, Any] | None:
    """The JSON object of an answer: the whole text, or a fenced block, or from its first brace
    to its last (models, and the offline model's label, put words around it)."""
    stripped = text.strip()
    candidates = [stripped]
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", stripped, re.DOTALL)
    if fenced:
        candidates.append(fenced.group(1))
    if "{" in stripped:
        candidates.append(stripped[stripped.index("{") : stripped.rindex("}") + 1])
    for candidate in candidates:
        try:
            found = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def _first_error(validator: Any, instance: Any, *, at: str = "") -> str:
    if validator.is_valid(instance):
        return ""
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:  # pragma: no cover — is_valid said there is one
        return "invalid"
    where = "/".join([*([at] if at else []), *(str(part) for part in error.absolute_path)])
    return f"{where or '(root)'}: {error.message}"


def envelope_hook(answer: str, run_input: dict[str, Any]) -> str | None:
    """The stop hook `envelope`: a sub-agent ends only with a valid result envelope."""
    _envelope, problem = parse_envelope(answer, run_input.get("contract"))
    if not problem:
        return None
    return (
        f"your final answer must be your result envelope, one JSON object, and {problem}."
        " Answer again with the whole envelope."
    )


def envelope_of(child: Run, name: str) -> dict[str, Any]:
    """What the parent sees of a child that ended: its own envelope when it ended done (and
    wrote one), else an envelope its run's status and record speak for."""
    output = child.output if isinstance(child.output, dict) else {}
    contract = (child.input or {}).get("contract") if isinstance(child.input, dict) else None
    head = {"name": name, "run": child.pk}
    if child.status == RunStatus.DONE:
        envelope, problem = parse_envelope(str(output.get("answer", "")), contract)
        if envelope is not None:
            return {**head, **envelope}
        return _ended(
            head, "failed", f"child run {child.pk} ended without a valid result envelope: {problem}"
        )
    if child.status == RunStatus.BUDGET_EXHAUSTED:
        return _ended(head, "budget_exhausted", _over_budget(child))
    if child.status == RunStatus.CANCELLED:
        return _ended(
            head, "cancelled", f"child run {child.pk} was cancelled ({child.error or 'stopped'})"
        )
    if child.status == RunStatus.PARTIAL:
        why = output.get("reason") or output.get("refused_by_stop_hook") or "it stopped early"
        return _ended(
            head, "partial", f"child run {child.pk} stopped without a result envelope: {why}"
        )
    if child.status == RunStatus.BLOCKED:
        why = (
            output.get("refused_by_stop_hook")
            or output.get("refusal")
            or output.get("reason")
            or "no reason given"
        )
        return _ended(head, "blocked", f"child run {child.pk} is blocked: {why}")
    return _ended(head, "failed", f"child run {child.pk} failed: {child.error or child.status}")


def _ended(head: dict[str, Any], status: str, error: str) -> dict[str, Any]:
    return {
        **head,
        "status": status,
        "payload": {},
        "artifacts": [],
        "evidence": {"commands": [], "tests": [], "sources": []},
        "open_questions": [],
        "error": error,
    }


def _over_budget(child: Run) -> str:
    """Which of its caps the child reached, in its own figures."""
    prefix = f"child run {child.pk} exceeded its budget"
    tokens = (
        child.input_tokens
        + child.output_tokens
        + child.cache_read_tokens
        + child.cache_write_tokens
    )
    if child.max_tokens is not None and tokens >= child.max_tokens:
        return f"{prefix}: {tokens} of {child.max_tokens} tokens"
    if child.max_usd_micros is not None and child.usd_micros >= child.max_usd_micros:
        return f"{prefix}: ${child.usd_micros / 1e6:.4f} of ${child.max_usd_micros / 1e6:.4f}"
    if child.max_seconds is not None and child.started_at is not None:
        ended = child.finished_at or timezone.now()
        seconds = int((ended - child.started_at).total_seconds())
        if seconds >= child.max_seconds:
            return f"{prefix}: {seconds} of {child.max_seconds} seconds"
    return f"{prefix}: {child.error or 'a budget above it was spent'}"
