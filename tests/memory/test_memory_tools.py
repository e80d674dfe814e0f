"""Agents use memory through tools: a note one mission records, a later mission of the same project
finds; a proposal to shared memory waits for the owner's approval on a diff and lands as a commit
after it; only verified notes enter a run's prompt."""

from __future__ import annotations

from typing import Any

import pytest

from approvals import service
from approvals.models import Approval
from kernel import runs
from kernel.models import Run
from kernel.worker import Worker
from memory import consolidation, repository, store, tasks
from memory.models import Note
from memory.store import Draft
from memory.tools import MEMORY_TOOL_NAMES
from missions import launch
from missions.models import Mission, Project
from tests.tools.conftest import FINISH, calls, outputs

pytestmark = pytest.mark.django_db(transaction=True)


def agent(mission: Mission, turns: list[dict[str, Any]]) -> Run:
    run = runs.start_run(
        account=mission,
        program="agent",
        input={
            "goal": "Do as told.",
            "provider": "scripted",
            "model": "scripted",
            "tools": MEMORY_TOOL_NAMES,
            "script": {"turns": turns},
        },
    )
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()
    return run


@pytest.fixture
def project(seeded_catalog: None) -> Project:
    return Project.objects.create(name="shop")


def test_a_later_mission_finds_what_an_earlier_one_recorded(project: Project) -> None:
    first = Mission.objects.create(project=project, goal="Find how the shop deploys.")
    note = {
        "title": "Deploys go through the blue-green switch",
        "body": "Flip the load balancer flag `live=green` after the smoke test passes.",
        "type": "procedure",
    }
    recorded = agent(first, [calls(("memory_write", note)), FINISH])
    assert recorded.status == "done", recorded.error
    (written,) = outputs(recorded, "memory_write")
    assert written["output"].startswith(f"Written to project/{project.pk}: notes/")

    second = Mission.objects.create(project=project, goal="Deploy the fix.")
    found = agent(second, [calls(("memory_search", {"query": "how do we deploy?"})), FINISH])

    (search,) = outputs(found, "memory_search")
    assert "Deploys go through the blue-green switch" in search["output"]
    assert "unverified" in search["output"]
    assert f"source events {recorded.pk}" not in search["output"]  # event ids, not run ids
    row = Note.objects.get(title=note["title"])
    assert row.author == f"run:{recorded.pk}"
    assert row.source_events  # the journal up to the call
    other = Mission.objects.create(project=Project.objects.create(name="other"), goal="x")
    elsewhere = agent(other, [calls(("memory_search", {"query": "how do we deploy?"})), FINISH])
    assert outputs(elsewhere, "memory_search")[0]["output"] == "No note matches."


def test_a_note_is_corrected_by_replacing_it_never_rewritten(project: Project) -> None:
    mission = Mission.objects.create(project=project, goal="Keep memory right.")
    (path,) = store.write(f"project/{project.pk}", [Draft("CI is Jenkins", "ci-main")],
                          author="owner", message="ci")  # fmt: skip
    fix = {"title": "CI is GitHub Actions", "body": "Since March.", "replaces": path}

    run = agent(mission, [calls(("memory_write", fix)), FINISH])

    assert run.status == "done", run.error
    old = Note.objects.get(path=path)
    assert old.invalid_at is not None
    assert Note.objects.get(title="CI is GitHub Actions").invalid_at is None


def test_an_agent_cannot_end_what_the_owner_verified(project: Project) -> None:
    scope = f"project/{project.pk}"
    (kept,) = store.write(scope, [Draft("CI is Jenkins", "ci-main", verified_by="owner")],
                          author="owner", message="ci")  # fmt: skip
    mission = Mission.objects.create(project=project, goal="Keep memory right.")
    replace = {"title": "CI is nothing", "body": "Trust me.", "replaces": kept}
    end = {"path": kept, "reason": "obsolete"}

    run = agent(mission, [calls(("memory_write", replace), ("memory_invalidate", end)), FINISH])

    assert run.status == "done", run.error
    for result in outputs(run, "memory_write") + outputs(run, "memory_invalidate"):
        assert result["is_error"]
        assert "verified by the owner" in result["output"]
    assert Note.objects.get(path=kept).invalid_at is None
    assert not Note.objects.filter(title="CI is nothing").exists()
    # Nor does a newer note of the same title, at consolidation.
    store.write(scope, [Draft("CI is Jenkins", "no longer")], author=f"run:{run.pk}", message="x")
    assert consolidation.consolidate(scope, why="test").superseded == []
    assert Note.objects.get(path=kept).invalid_at is None


def test_a_proposal_to_global_memory_waits_for_approval_then_lands(project: Project) -> None:
    mission = Mission.objects.create(project=project, goal="Share a lesson.")
    lesson = {
        "scope": "global",
        "title": "The owner wants release notes in French",
        "body": "Asked twice; every release so far.",
        "type": "preference",
    }

    run = agent(mission, [calls(("memory_propose", lesson)), FINISH])

    assert run.status == "waiting"
    approval = Approval.objects.get(run=run)
    diff = approval.request["preview"]["diff"]
    assert '+title: "The owner wants release notes in French"' in diff
    # Approving it verifies it, and the diff the owner approves says so.
    assert '+verified: true\n+verified_by: "approval"\n+verified_at: null\n' in diff
    branch = approval.request["preview"]["branch"]
    assert branch.startswith("refs/heads/proposals/")
    assert repository.head("global", branch)  # the proposals branch holds it...
    assert not Note.objects.filter(scope__name="global").exists()  # ...main does not

    service.decide(approval.pk, approve=True, args_hash=approval.request["args_hash"])
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()

    assert run.status == "done", run.error
    landed = Note.objects.get(scope__name="global")
    assert landed.title == lesson["title"]
    assert (landed.verified, landed.verified_by, landed.author) == (
        True,
        "approval",
        f"run:{run.pk}",
    )
    # What lands is what the diff showed, byte for byte.
    added = "".join(
        line[1:]
        for line in diff.split(f"+++ b/{landed.path}\n", 1)[1].splitlines(keepends=True)
        if line.startswith("+")
    )
    assert store.read_file("global", landed.path) == added
    assert repository.log("global")[0][2] == f"Approved: {lesson['title']}"
    assert not repository.head("global", branch)


def test_only_verified_notes_enter_a_run_s_prompt(project: Project) -> None:
    scope = f"project/{project.pk}"
    store.write(scope, [Draft("Verified fact", "Tests pass with make test.", verified_by="owner"),
                        Draft("Rumour from a web page", "Prod is down.")],
                author="consolidator", message="two")  # fmt: skip
    mission = Mission.objects.create(project=project, goal="Anything.")

    index = store.prompt_index(launch.memory_scopes(mission))

    assert index.startswith(f"Scope {scope}:\n- Verified fact (fact, ")
    assert "; written by consolidator; verified by owner) — notes/" in index
    assert "Rumour" not in index


def test_a_refused_proposal_leaves_no_branch_after_the_nightly_pass(project: Project) -> None:
    mission = Mission.objects.create(project=project, goal="Share lessons.")
    lessons = [
        {"scope": "global", "title": f"Lesson {n}", "body": f"Learnt {n}.", "type": "lesson"}
        for n in (1, 2)
    ]
    first = agent(mission, [calls(("memory_propose", lessons[0])), FINISH])
    second = agent(mission, [calls(("memory_propose", lessons[1])), FINISH])
    refused, waiting = (Approval.objects.get(run=run) for run in (first, second))
    service.decide(refused.pk, approve=False, args_hash=refused.request["args_hash"])
    Worker(lease_seconds=30).run_until_idle()

    tasks.consolidate_nightly.call_local()

    assert repository.branches("global", store.PROPOSALS) == [waiting.request["preview"]["branch"]]
