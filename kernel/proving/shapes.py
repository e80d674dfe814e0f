"""What the crash sweep checks (`kernel.proving.sweep`): a workload run's family as the database
holds it (`Shape`), the invariants that hold at any instant, even right after a crash
(`invariants`), and those that hold once it has ended, against the run that never crashed
(`compare`).

Effects are counted as `kernel.proving.chaos.check` counts them (`ChaosEffect` rows, the world
outside the journal, by idempotency key), all in one query: the sweep checks after each of
thousands of crashes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import connection

from kernel.models import StepKind, WaitKind, WaitState

LEDGER = ("usd_micros", "input_tokens", "output_tokens", "turns", "tool_calls")
# Debited with a step's result, in the same statement: right at any instant. Turns and tool
# calls of free steps are billed later (when the run parks or ends): right once it has ended.
_DEBITED_WITH_RESULTS = ("usd_micros", "input_tokens")
# The workload's steps that act outside; `ledger.transfer`: the tool harness's own, called
# through the harness after the owner's approval (`missions.proving.sweep_harness`).
_EFFECTS = ("ledger.put", "ledger.send", "ledger.pay", "ledger.transfer")
# Results that name run ids or times, different in every run of a workload.
_UNSTABLE = frozenset((StepKind.SPAWN, StepKind.JOIN, StepKind.TIMER))


@dataclass
class Shape:
    """A workload run's family: its runs in id order (a run is named by its place there: 0 is
    the root), their steps, waits, and the world's effects by step."""

    runs: list[dict[str, Any]]
    # (place, seq, kind, name, request_hash, result, usd_micros, input_tokens, finished)
    steps: list[tuple[Any, ...]]
    waits: list[tuple[Any, ...]]  # (place, seq, kind, state)
    applied: dict[tuple[int, int], int]  # (place, seq) -> times its effect was applied

    @classmethod
    def of(cls, root: int) -> Shape:
        """The family of run `root` now, in one query (the sweep reads it after every death)."""
        with connection.cursor() as cursor:
            cursor.execute(_SHAPE, {"root": root})
            row = cursor.fetchone()
        found = json.loads(row[0]) if row and isinstance(row[0], str) else row[0] if row else {}
        family = found["runs"]
        place = {run["pk"]: index for index, run in enumerate(family)}
        steps = [(place[step[0]], *step[1:9]) for step in found["steps"]]
        applied = {
            (place[step[0]], step[1]): step[9] for step in found["steps"] if step[9] is not None
        }
        waits = sorted((place[wait[0]], *wait[1:]) for wait in found["waits"])
        return cls(family, steps, waits, applied)


# The family's runs, steps and waits; for each step that acts on the world, how many times it
# did (`ChaosEffect` rows under its idempotency key: `kernel.journal.idempotency_key`).
_SHAPE = f"""
WITH family AS (SELECT * FROM kernel_run WHERE root_id = %(root)s)
SELECT json_build_object(
    'runs', (SELECT coalesce(json_agg(json_build_object(
        'pk', id, 'status', status, 'output', output, 'lease_owner', lease_owner,
        'leased', lease_expires_at IS NOT NULL, 'ancestors', ancestors,
        'usd_micros', usd_micros, 'input_tokens', input_tokens, 'output_tokens', output_tokens,
        'turns', turns, 'tool_calls', tool_calls) ORDER BY id), '[]') FROM family),
    'steps', (SELECT coalesce(json_agg(json_build_array(s.run_id, s.seq, s.kind, s.name,
        s.request_hash, s.result, s.usd_micros, s.input_tokens, s.finished_at IS NOT NULL,
        CASE WHEN s.name IN {_EFFECTS!r} THEN (SELECT count(*) FROM kernel_chaoseffect e
            WHERE e.key = encode(sha256(convert_to(
                'agentos-step:' || s.run_id || ':' || s.seq, 'UTF8')), 'hex')) END
        ) ORDER BY s.run_id, s.seq), '[]') FROM kernel_step s JOIN family f ON f.id = s.run_id),
    'waits', (SELECT coalesce(json_agg(json_build_array(w.run_id, w.seq, w.kind, w.state)), '[]')
        FROM kernel_wait w JOIN family f ON f.id = w.run_id))
"""  # noqa: S608  # a constant tuple of names, no input


def invariants(shape: Shape) -> list[str]:
    """What must hold at any instant, a crash included: each run's journal numbered from 1
    without a gap, no effect applied twice nor by a step with a result and without its one
    effect, the ledger of each run the sum of its tree's recorded costs, no owner question
    answered twice."""
    found: list[str] = []
    seqs: dict[int, list[int]] = {}
    finished: dict[tuple[int, int], bool] = {}
    for step in shape.steps:
        seqs.setdefault(step[0], []).append(step[1])
        finished[step[0], step[1]] = step[-1]
    for place, numbers in seqs.items():
        if numbers != list(range(1, len(numbers) + 1)):
            found.append(f"run {place} journal seqs {numbers}: not contiguous from 1")
    for (place, seq), count in sorted(shape.applied.items()):
        if count > 1 or (count != 1 and finished.get((place, seq))):
            result = "with" if finished.get((place, seq)) else "without"
            found.append(f"run {place} step {seq} applied {count} times ({result} a result)")
    for index, run in enumerate(shape.runs):
        tree = {index} | {
            other for other, row in enumerate(shape.runs) if run["pk"] in row["ancestors"]
        }
        for column, position in zip(_DEBITED_WITH_RESULTS, (6, 7), strict=True):
            recorded = sum(step[position] for step in shape.steps if step[0] in tree)
            if run[column] != recorded:
                found.append(
                    f"run {index} ledger {column}={run[column]}, its tree's steps cost {recorded}"
                )
    keys = [(wait[0], wait[1], wait[2]) for wait in shape.waits]
    if len(keys) != len(set(keys)):
        found.append(f"two waits for one step: {shape.waits}")
    return found


def compare(shape: Shape, baseline: Shape) -> list[str]:
    """Once the family has ended: the invariants, and everything as in the run that never
    crashed (each effect applied exactly once, every step with its result, no lease held, the
    ledger debited once per step, every owner question asked once and answered)."""
    found = invariants(shape)
    found += [
        f"run {place} step {seq} applied {count} times"
        for (place, seq), count in sorted(shape.applied.items())
        if count == 0
    ]
    if len(shape.runs) != len(baseline.runs):
        found.append(f"{len(shape.runs)} runs in the family, {len(baseline.runs)} without crash")
    for place, (run, calm) in enumerate(zip(shape.runs, baseline.runs, strict=False)):
        if run["status"] != calm["status"] or run["output"] != calm["output"]:
            found.append(f"run {place} ended {run['status']} {run['output']!r}")
        if run["lease_owner"] or run["leased"]:
            found.append(f"run {place} still leased to {run['lease_owner']!r}")
        if ledger := {k: run[k] for k in LEDGER if run[k] != calm[k]}:
            expected = {k: calm[k] for k in ledger}
            found.append(f"run {place} ledger {ledger}, {expected} without crash")
    if len(shape.steps) != len(baseline.steps):
        found.append(f"{len(shape.steps)} steps, {len(baseline.steps)} without crash")
    for step, calm_step in zip(shape.steps, baseline.steps, strict=False):
        found += _compare_step(step, calm_step)
    for place, seq, kind, state in shape.waits:
        if state == WaitState.OPEN:
            found.append(f"run {place} step {seq}: its {kind} wait is still open")
    # Reconciliation questions come from crashes only: the owner's own are compared.
    human = [wait for wait in shape.waits if wait[2] == WaitKind.HUMAN]
    if human != [wait for wait in baseline.waits if wait[2] == WaitKind.HUMAN]:
        found.append(f"owner waits {human}, not as without crash")
    return found


def _compare_step(step: tuple[Any, ...], calm: tuple[Any, ...]) -> list[str]:
    place, seq, kind, name, hashed, result, usd, tokens, finished = step
    if not finished:
        return [f"run {place} step {seq} ({name}) has no result"]
    # A join's request names its children's ids, different in every run.
    if (place, seq, kind, name) != calm[:4] or (kind != StepKind.JOIN and hashed != calm[4]):
        return [f"run {place} step {seq} is {kind} {name}, {calm[2]} {calm[3]} without crash"]
    if kind not in _UNSTABLE and result != calm[5]:
        return [f"run {place} step {seq} ({name}) result {result!r}, {calm[5]!r} without crash"]
    if (usd, tokens) != calm[6:8]:
        return [f"run {place} step {seq} ({name}) cost {usd} µ$ {tokens} tokens, not {calm[6:8]}"]
    return []
