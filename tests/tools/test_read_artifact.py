"""`read_artifact` reads the artifacts of the calling run's mission, and no other."""

from __future__ import annotations

import threading

import pytest

from kernel import artifacts
from kernel.context import StepCall
from kernel.journal import Fence
from kernel.models import Artifact, Run
from missions.engine import relief
from tests.kernel.factories import make_mission, start
from tools.base import ToolEnv, text_of
from tools.builtin import READ_ARTIFACT

pytestmark = pytest.mark.django_db


def read(run: Run, sha256: str) -> str:
    call = StepCall(run.pk, 1, "k", {}, False, threading.Event(), Fence(run.pk, 1))
    return text_of(READ_ARTIFACT.run(ToolEnv(call, run.pk, None, None), {"sha256": sha256}))


def test_it_reads_an_artifact_of_its_own_mission_only() -> None:
    mine, theirs = make_mission(), make_mission()
    writer = start("agent", account=mine)
    sibling = start("agent", account=mine)
    outsider = start("agent", account=theirs)
    secret = artifacts.store(content=b"the owner's token is hunter2", run=writer)
    orphan = artifacts.store(content=b"stored without a run")

    assert read(writer, secret.sha256) == "the owner's token is hunter2"
    assert read(sibling, secret.sha256) == "the owner's token is hunter2"  # same mission
    # Another mission's artifact answers exactly as one that does not exist.
    assert read(outsider, secret.sha256) == f"No artifact {secret.sha256}."
    assert read(outsider, "0" * 64) == f"No artifact {'0' * 64}."
    assert read(writer, orphan.sha256) == f"No artifact {orphan.sha256}."


def test_an_output_another_mission_offloaded_first_stays_readable_by_each() -> None:
    first = start("agent", account=make_mission())
    second = start("agent", account=make_mission())
    output = "the same long test output\n" * 1000

    preview_one = relief.offload(output, tool="shell", run=first)
    preview_two = relief.offload(output, tool="shell", run=second)

    one, two = (preview.rsplit("artifact ", 1)[1][:64] for preview in (preview_one, preview_two))
    assert one != two  # identical content, kept once per mission
    assert read(first, one).startswith("the same long test output")
    assert read(second, two).startswith("the same long test output")
    assert read(second, one) == f"No artifact {one}."
    stored = Artifact.objects.get(sha256=two)
    with artifacts.open_artifact(stored) as handle:
        assert handle.read().startswith(output.encode())  # offsets unchanged: added at the end
