"""The in-process crash sweep (`kernel.proving.sweep`, `make chaos` runs 10,000 points): a small
sweep of each mode finds nothing, and a kernel or a workload that breaks an invariant is caught,
reproducibly from the seed and point it names."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from kernel import crashpoints, proving
from kernel.context import RunContext
from kernel.models import Effect, StepKind
from kernel.proving import chaos, scripted, sweep
from kernel.proving import harness as owner

# The points of the kernel's loop (the backup and restore commands have their own).
KERNEL_POINTS = set(crashpoints.POINTS) - {"backup_mid_write", "restore_before_finish"}

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


@pytest.fixture(autouse=True)
def _programs(monkeypatch: pytest.MonkeyPatch) -> None:
    proving.register()
    # The kernel's own workloads: the apps' extensions (`manage.py chaos` registers them) are
    # swept by their own tests (tests/missions/test_crash_sweep_harness.py).
    monkeypatch.setattr(scripted, "EXTRA_OPS", {})
    monkeypatch.setattr(owner, "OWNER_ANSWERS", {})


def test_it_finds_no_violation_in_200_crash_points_of_a_chain() -> None:
    report = sweep.sweep(points=200, seed=1)

    print(report.line(), f"{report.rate:.0f}/s")
    assert report.violations == []
    assert report.crash_points == 200
    assert report.workloads >= 3
    assert report.steps > 0
    # A chain also dies where only a recovery goes: after the owner said a step did not happen.
    assert set(report.by_point) == KERNEL_POINTS - {"lease_renew", "cancel_seen"}


def test_it_finds_no_violation_crashing_each_point_of_a_workload_in_a_fresh_run() -> None:
    # Workload 16 sends without a probe, spawns and joins a child, waits on the owner.
    assert scripted.ops_of(16) == ["pay", "model", "child", "ask"]
    report = sweep.sweep(points=60, seed=16, mode="single")

    print(report.line())
    assert report.violations == []
    assert report.crash_points == 60


def test_it_passes_every_crash_point_of_the_commit_path_but_stops_and_renewals() -> None:
    sweeper = sweep.Sweep()

    passed = {hit.point for seed in range(12) for hit in sweeper.dry_pass(seed).hits}
    # Only a recovery passes `verdict_marked`: a chain dies there (the test above).
    assert KERNEL_POINTS - passed == {"lease_renew", "cancel_seen", "verdict_marked"}


def test_its_crash_is_not_an_exception_any_product_code_would_catch() -> None:
    assert not issubclass(crashpoints.Crash, Exception)


def _not_idempotent(ctx: RunContext, index: int) -> object:
    """`put`, declared an idempotent write but appending blindly (the bug the sweep must see)."""
    return ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.IDEMPOTENT_WRITE,
        name="ledger.put",
        request={"value": index},
        execute=chaos.blind_append,
    )


def test_it_catches_a_step_declared_idempotent_that_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(scripted.OPS, "put", _not_idempotent)
    monkeypatch.setattr(scripted, "ops_of", lambda seed: ["model", "put"])

    report = sweep.sweep(points=40, seed=7, mode="single")

    assert any("applied 2 times" in violation for violation in report.violations)
    assert any("after_effect_before_result (root, seq 2)" in v for v in report.violations)
    seed, point = report.failing[0]
    assert f"--sweep-seed {seed} --sweep-point {point}" in report.violations[0]
    replayed = sweep.sweep(points=1, seed=seed, mode="single", only=point)
    assert replayed.failing == [(seed, point)]


def test_it_catches_a_kernel_that_repeats_a_non_idempotent_step_blindly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(RunContext, "_reconcile", lambda self, call, probe: None)
    monkeypatch.setattr(scripted, "ops_of", lambda seed: ["read", "pay", "model"])

    report = sweep.sweep(points=100, seed=3)

    assert report.violations
    assert any(re.search(r"step 2 applied 2 times", v) for v in report.violations)
    # The chain's death that broke it replays alone, from the seed and number it names.
    seed, point = report.failing[0]
    replayed = sweep.sweep(points=1, seed=seed, only=point)
    assert (seed, point) in replayed.failing


def test_its_command_refuses_a_point_to_replay_without_its_workloads_seed() -> None:
    with pytest.raises(CommandError) as refused:
        call_command("chaos", "--sweep-point", "3")
    assert str(refused.value) == "--sweep-point K replays a workload: give its --sweep-seed too."


def test_its_command_replays_one_workload_up_to_a_point_and_prints_the_chaos_line() -> None:
    out = io.StringIO()

    call_command("chaos", "--sweep-seed", "4", "--sweep-point", "5", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[-1] == "chaos kills=0 steps=3 crash_points=6 violations=0"
    assert "sweep (chain): 6 crash points of 1 workloads (seeds 4..4)" in out.getvalue()
