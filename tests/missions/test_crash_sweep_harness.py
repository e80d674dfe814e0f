"""The crash sweep through the tool harness (`missions.proving.sweep_harness`): workloads whose
model answer's calls are judged, approved by the owner through the approvals service, run and
recorded by `missions.engine.harness`, crashed at every point they pass."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from agentos.core.models import AuditEvent
from approvals.models import Approval, Status
from kernel import proving
from kernel.models import ChaosEffect, StepKind, WaitKind
from kernel.proving import harness as owner
from kernel.proving import scripted, sweep
from missions.proving import sweep_harness

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

HARNESS = scripted.EXTRA_SEEDS  # from here on, every workload calls the harness once


@pytest.fixture(autouse=True)
def _extension(monkeypatch: pytest.MonkeyPatch) -> None:
    # Registered through the product's settings, as `manage.py chaos` does, into registries
    # this test owns: the kernel's own sweep tests run without it.
    proving.register()
    monkeypatch.setattr(scripted, "EXTRA_OPS", {})
    monkeypatch.setattr(owner, "OWNER_ANSWERS", {})
    proving.register_extensions()


def _harness_steps(workload: sweep.Workload) -> tuple[int, int]:
    """The seqs (in the root) of the approval's request and of the transfer it let through."""
    steps = [step for step in workload.baseline.steps if step[0] == 0]
    request = next(s[1] for s in steps if s[3] == f"approval-request:{sweep_harness.TRANSFER.name}")
    transfer = next(s[1] for s in steps if s[3] == sweep_harness.TRANSFER.name)
    return request, transfer


def test_it_draws_the_harness_operation_only_from_its_own_seeds() -> None:
    assert scripted.ops_of(16) == ["pay", "model", "child", "ask"]
    assert sweep_harness.OP in scripted.ops_of(HARNESS + 16)
    first = list(zip(range(6), scripted.seeds(4), strict=False))
    assert [seed for _, seed in first] == [4, HARNESS + 4, 5, 6, 7, 8]


def test_it_runs_a_transfer_once_the_owner_approved_it_through_approvals() -> None:
    workload = sweep.Sweep().dry_pass(HARNESS + 1)

    assert sweep_harness.OP in workload.ops
    request, transfer = _harness_steps(workload)
    root = workload.baseline.runs[0]
    index = workload.ops.index(sweep_harness.OP)
    assert root["status"] == "done"
    assert root["output"][index] == [
        [f"look-{index}", f"balance {index * 2}", False],
        [f"transfer-{index}", f"transferred {index}", False],
    ]
    assert (0, request + 1, WaitKind.HUMAN, "answered") in workload.baseline.waits
    assert workload.baseline.applied[0, transfer] == 1
    approval = Approval.objects.get()
    assert approval.status == Status.APPROVED
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.APPROVAL_DECIDED).count() == 1
    # The approval path's crash points: its wait recorded, the run parked, the approved
    # non-idempotent step's effect applied before its result.
    hits = set(workload.hits)
    assert sweep.Hit("wait_recorded", 0, request + 1) in hits
    assert sweep.Hit("suspend_committed", 0, 0) in hits  # parked on the approval
    assert sweep.Hit("after_effect_before_result", 0, transfer) in hits


def test_it_finds_no_violation_in_100_crash_points_through_the_harness() -> None:
    report = sweep.sweep(points=100, seed=HARNESS)

    print(report.line(), f"{report.rate:.0f}/s")
    assert report.violations == []
    assert report.crash_points == 100
    assert report.workloads >= 3
    assert {"wait_recorded", "suspend_committed", "after_effect_before_result"} <= set(
        report.by_point
    )
    # Each transfer ran once per workload run, however many times its run died around it.
    applied = ChaosEffect.objects.filter(value__applied__isnull=False)
    assert applied.count() == len(set(applied.values_list("key", flat=True)))


def test_it_finds_no_violation_dying_once_at_each_point_of_the_approval_path() -> None:
    sweeper = sweep.Sweep()
    workload = sweeper.dry_pass(HARNESS + 1)
    request, transfer = _harness_steps(workload)

    # The approval's request, its wait, the run parked on it, and the transfer it let through.
    path = [
        number
        for number, hit in enumerate(workload.hits)
        if hit.seq in (request, request + 1, transfer) or hit.point == "suspend_committed"
    ]
    for number in path:
        sweeper.single(workload, number)

    assert sweeper.report.violations == []
    assert {"wait_recorded", "suspend_committed", "after_effect_before_result"} <= set(
        sweeper.report.by_point
    )
    assert sweeper.report.crash_points == len(path) >= 8


def test_its_command_replays_a_harness_workload_from_its_seed() -> None:
    out = io.StringIO()

    call_command("chaos", "--sweep-seed", str(HARNESS + 1), "--sweep-point", "12", stdout=out)

    assert "sweep (chain): 13 crash points of 1 workloads" in out.getvalue()
    assert out.getvalue().splitlines()[-1].endswith("crash_points=13 violations=0")
    assert Approval.objects.filter(state="answered").exists()


def test_it_sees_a_transfer_the_owner_never_approved() -> None:
    # An owner who answers every question alike, not through approvals: the harness refuses
    # the call, and the sweep sees a transfer step whose effect never happened.
    owner.OWNER_ANSWERS.clear()

    workload = sweep.Sweep().dry_pass(HARNESS + 1)

    _request, transfer = _harness_steps(workload)
    assert workload.baseline.applied[0, transfer] == 0
    step = next(s for s in workload.baseline.steps if s[:2] == (0, transfer))
    assert step[2] == StepKind.TOOL_CALL
    assert "the owner refused" in step[5]["output"]
