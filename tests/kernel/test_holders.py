"""Lease holders: a dead worker's leases are freed by the next claim, a live one's never."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
from collections.abc import Iterator

import pytest

from kernel import holders, scheduler
from kernel.models import Event, Run
from tests.kernel.factories import make_mission, start
from tests.polling import wait_for

pytestmark = pytest.mark.skipif(holders.this_process() is None, reason="needs Linux /proc")


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait(timeout=10)


def holder_of(process: subprocess.Popen[bytes]) -> holders.Holder:
    here = holders.this_process()
    assert here is not None
    found = holders._stat(process.pid)
    assert found is not None
    return dataclasses.replace(here, pid=process.pid, start=found[1])


def wait_for_state(pid: int, state: str) -> None:
    wait_for(
        lambda: (found := holders._stat(pid)) is not None and found[0] == state,
        timeout=10,
        message=f"process {pid} to reach state {state}",
        interval=0.01,
    )


def test_it_names_a_holder_it_can_parse_back() -> None:
    here = holders.this_process()
    assert here is not None

    assert holders.parse(here.name) == here
    assert holders.parse("host:123") is None  # an older lease: never judged
    assert holders.parse("test") is None


def test_it_proves_a_killed_process_gone_even_before_it_is_collected(
    child: subprocess.Popen[bytes],
) -> None:
    holder = holder_of(child)
    assert not holders.gone(holder)

    child.send_signal(signal.SIGKILL)
    wait_for_state(child.pid, "Z")  # a zombie: killed, not yet collected by its parent

    assert holders.gone(holder)
    child.wait(timeout=10)
    assert holders.gone(holder)


def test_it_never_judges_a_paused_process_gone(child: subprocess.Popen[bytes]) -> None:
    holder = holder_of(child)

    child.send_signal(signal.SIGSTOP)
    wait_for_state(child.pid, "T")

    assert not holders.gone(holder)  # only its lease running out frees its runs (fencing)


def test_it_sees_a_reused_pid_as_another_process(child: subprocess.Popen[bytes]) -> None:
    holder = holder_of(child)

    assert holders.gone(dataclasses.replace(holder, start=holder.start - 1))


def test_it_judges_no_process_of_another_machine_or_namespace(
    child: subprocess.Popen[bytes],
) -> None:
    holder = holder_of(child)
    child.kill()
    child.wait(timeout=10)

    assert not holders.gone(dataclasses.replace(holder, space="elsewhere.1"))
    assert not holders.gone(dataclasses.replace(holder, host="another-host"))


@pytest.mark.django_db(transaction=True)
def test_it_frees_at_the_next_claim_only_the_runs_of_a_dead_holder(
    child: subprocess.Popen[bytes],
) -> None:
    mission = make_mission()
    dead_run, live_run, foreign_run = (start("chaos.noop", account=mission) for _ in range(3))
    dead = holder_of(child)
    live = holders.this_process()
    assert live is not None
    foreign = dataclasses.replace(dead, host="another-host")
    for run, holder in ((dead_run, dead), (live_run, live), (foreign_run, foreign)):
        (claim,) = scheduler.claim_runs(worker=holder.name, lease_seconds=30, limit=1)
        assert claim.fence.run_id == run.pk
    assert scheduler.claim_runs(worker="other", lease_seconds=30, limit=5) == []

    child.kill()
    child.wait(timeout=10)
    claims = scheduler.claim_runs(worker="other", lease_seconds=30, limit=5)

    assert [c.fence.run_id for c in claims] == [dead_run.pk]
    assert claims[0].fence.token == 2  # a new fence: the dead holder's writes are refused
    assert Run.objects.get(pk=live_run.pk).lease_owner == live.name
    assert Run.objects.get(pk=foreign_run.pk).lease_owner == foreign.name
    assert Event.objects.filter(run_id=dead_run.pk, kind="run.lease_freed").count() == 1
