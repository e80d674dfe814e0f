"""Runs over /api/v1: the tree, a run, its steps and artifacts, and steering."""

from __future__ import annotations

from typing import Any

import pytest

from kernel import runs
from kernel.models import Event, Run, Step
from kernel.worker import Worker
from missions.models import OwnerMessage
from tests.agentos.test_api import error_of
from tests.api.conftest import Api
from tests.api.factories import add_steps, end_run, make_artifact, make_mission


def test_it_shows_the_run_tree_of_a_mission(api: Api) -> None:
    mission, root = make_mission()
    child = runs.start_run(account=mission, program="agent", input={}, parent=root)
    grandchild = runs.start_run(account=mission, program="agent", input={}, parent=child)
    make_mission("Another mission")

    tree = api.get(f"/missions/{mission.pk}/runs").json()

    assert [(r["id"], r["parent_id"], r["depth"]) for r in tree] == [
        (root.pk, None, 0),
        (child.pk, root.pk, 1),
        (grandchild.pk, child.pk, 2),
    ]
    assert tree[0] == {
        "id": root.pk,
        "mission_id": mission.pk,
        "parent_id": None,
        "root_id": root.pk,
        "depth": 0,
        "status": "queued",
        "paused": False,
        "stop_requested": False,
        "needs_migration": False,
        "program": "agent",
        "engine_version": "1",
        "model": "scripted",
        "trigger": "test",
        "spent": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "usd_micros": 0,
            "turns": 0,
            "tool_calls": 0,
        },
        "created_at": tree[0]["created_at"],
        "started_at": None,
        "finished_at": None,
    }
    assert {r["root_id"] for r in tree} == {root.pk}
    assert api.get("/missions/999999/runs").status_code == 404


def test_it_shows_a_run_with_its_input_caps_and_output(api: Api) -> None:
    _mission, run = make_mission()

    body = api.get(f"/runs/{run.pk}").json()

    assert body["input"]["goal"] == "Write the release notes."
    assert body["caps"] == {
        "max_tokens": None,
        "max_usd_micros": None,
        "max_turns": None,
        "max_tool_calls": None,
        "max_seconds": 14_400,  # the mission's wall time: the owner's default
    }
    assert (body["output"], body["error"], body["contract"]["trigger"]) == (None, "", "test")
    response = api.get("/runs/999999")
    assert (response.status_code, error_of(response)["code"]) == (404, "not_found")


def test_it_pages_the_steps_of_a_run_with_their_cost(api: Api) -> None:
    _mission, run = make_mission()
    add_steps(run, 3, unfinished=1)

    first = api.get(f"/runs/{run.pk}/steps", {"limit": 2}).json()
    rest = api.get(f"/runs/{run.pk}/steps", {"after_seq": first["next_after_seq"]}).json()

    assert [s["seq"] for s in first["items"]] == [1, 2]
    assert first["next_after_seq"] == 2
    assert [s["seq"] for s in rest["items"]] == [3, 4]
    assert rest["next_after_seq"] is None
    step = first["items"][1]
    assert step == {
        "seq": 2,
        "kind": "model_call",
        "effect": "model_call",
        "name": "scripted",
        "request": {"messages": [{"role": "user", "content": "turn 2"}]},
        "result": {"text": "answer 2"},
        "settled_by": "executed",
        "started_at": step["started_at"],
        "finished_at": step["finished_at"],
        "cost": {
            "input_tokens": 200,
            "output_tokens": 20,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "usd_micros": 2000,
        },
    }
    assert rest["items"][1]["result"] is None
    assert rest["items"][1]["finished_at"] is None


@pytest.mark.parametrize("params", [{"after_seq": -1}, {"limit": 0}, {"limit": 501}])
def test_it_refuses_a_bad_step_page(api: Api, params: dict[str, int]) -> None:
    _mission, run = make_mission()

    response = api.get(f"/runs/{run.pk}/steps", params)

    assert (response.status_code, error_of(response)["code"]) == (422, "invalid_input")


def test_it_lists_and_downloads_artifacts(api: Api) -> None:
    _mission, run = make_mission()
    artifact = make_artifact(run, b"<h1>notes</h1>", name="notes.html", media_type="text/html")

    listed = api.get(f"/runs/{run.pk}/artifacts").json()
    response = api.get(f"/artifacts/{artifact.sha256}")

    assert listed == [
        {
            "sha256": artifact.sha256,
            "name": "notes.html",
            "media_type": "text/html",
            "size": 14,
            "preview": "<h1>notes</h1>",
            "run_id": run.pk,
            "created_at": listed[0]["created_at"],
        }
    ]
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"<h1>notes</h1>"
    assert response["Content-Type"] == "text/html"
    # Never rendered under the console's origin: always a download.
    assert response["Content-Disposition"] == 'attachment; filename="notes.html"'
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("sha256", ["0" * 64, "not-a-hash", "A" * 64])
def test_it_answers_404_for_an_unknown_artifact(api: Api, sha256: str) -> None:
    response = api.get(f"/artifacts/{sha256}")

    assert (response.status_code, error_of(response)["code"]) == (404, "not_found")


def test_it_answers_404_when_the_artifact_file_is_gone(api: Api) -> None:
    from kernel import artifacts

    _mission, run = make_mission()
    artifact = make_artifact(run, b"gone")
    artifacts.path_of(artifact).unlink()

    response = api.get(f"/artifacts/{artifact.sha256}")

    assert (response.status_code, error_of(response)["code"]) == (404, "artifact_missing")
    assert api.get(f"/runs/{run.pk}/artifacts").json()[0]["sha256"] == artifact.sha256


# --- steering -----------------------------------------------------------------------------------


def test_it_sends_a_message_to_a_run(api: Api) -> None:
    _mission, run = make_mission()

    response = api.post(f"/runs/{run.pk}/messages", {"text": " Use the 1.3 tag. "})

    assert response.status_code == 201
    message = OwnerMessage.objects.get()
    assert response.json() == {
        "id": message.pk,
        "run_id": run.pk,
        "text": "Use the 1.3 tag.",
        "created_at": response.json()["created_at"],
        "delivered_seq": None,
    }
    assert Event.objects.filter(run_id=run.pk, kind="owner.message").exists()
    assert not Run.objects.get(pk=run.pk).interrupt_requested


def test_a_message_may_interrupt_the_step_under_way(api: Api) -> None:
    _mission, run = make_mission()

    api.post(f"/runs/{run.pk}/messages", {"text": "Stop that command.", "interrupt": True})

    assert Run.objects.get(pk=run.pk).interrupt_requested


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"text": "   "}, 400),
        ({"text": "x" * 20_001}, 422),
        ({}, 422),
        ({"text": "go", "interrupt": "yes"}, 422),
        ({"text": "go", "urgent": True}, 422),
    ],
)
def test_it_refuses_a_bad_message(api: Api, body: dict[str, Any], status: int) -> None:
    _mission, run = make_mission()

    response = api.post(f"/runs/{run.pk}/messages", body)

    assert response.status_code == status
    assert not OwnerMessage.objects.exists()


def test_it_pauses_resumes_stops_and_interrupts_a_run(api: Api) -> None:
    _mission, run = make_mission()

    paused = api.post(f"/runs/{run.pk}/pause")
    paused_again = api.post(f"/runs/{run.pk}/pause")
    resumed = api.post(f"/runs/{run.pk}/resume")
    interrupted = api.post(f"/runs/{run.pk}/interrupt")
    stopped = api.post(f"/runs/{run.pk}/stop")

    assert (paused.status_code, paused.json()["paused"]) == (200, True)
    assert paused_again.json()["paused"] is True
    assert (resumed.status_code, resumed.json()["paused"]) == (200, False)
    assert interrupted.status_code == 200
    assert Run.objects.get(pk=run.pk).interrupt_requested
    assert (stopped.status_code, stopped.json()["stop_requested"]) == (200, True)
    kinds = set(Event.objects.filter(run_id=run.pk).values_list("kind", flat=True))
    assert {
        "run.paused",
        "run.resumed",
        "run.interrupt_requested",
        "run.stop_requested",
    } <= kinds


@pytest.mark.parametrize("verb", ["pause", "resume", "stop", "interrupt", "messages"])
def test_it_refuses_to_steer_a_finished_run_and_changes_nothing(api: Api, verb: str) -> None:
    _mission, run = make_mission()
    end_run(run)
    events = Event.objects.count()

    response = api.post(f"/runs/{run.pk}/{verb}", {"text": "hello"})

    assert response.status_code == 409
    assert error_of(response)["code"] in {"run_ended", "already_ended"}
    assert Event.objects.count() == events
    assert not OwnerMessage.objects.exists()
    assert not Run.objects.get(pk=run.pk).cancel_requested


@pytest.mark.parametrize("verb", ["pause", "resume", "stop", "interrupt", "messages", "fork"])
def test_it_answers_404_when_steering_an_unknown_run(api: Api, verb: str, db: None) -> None:
    body = {"messages": {"text": "hello"}, "fork": {"at_seq": 1}}.get(verb)

    response = api.post(f"/runs/999999/{verb}", body)

    assert (response.status_code, error_of(response)["code"]) == (404, "not_found")


def test_it_forks_a_run_from_a_recorded_step(api: Api) -> None:
    _mission, run = make_mission()
    add_steps(run, 3)
    end_run(run)

    response = api.post(f"/runs/{run.pk}/fork", {"at_seq": 2})

    assert response.status_code == 201
    fork = Run.objects.get(pk=response.json()["id"])
    assert response.json()["contract"]["forked_from"] == {"run": run.pk, "seq": 2}
    assert (fork.status, fork.parent_id, fork.root_id) == ("queued", None, fork.pk)
    assert list(Step.objects.filter(run=fork).values_list("seq", "settled_by")) == [
        (1, "forked"),
        (2, "forked"),
    ]


@pytest.mark.parametrize(
    ("at_seq", "status", "code"),
    [(4, 404, "not_found"), (3, 409, "not_recorded"), (0, 422, "invalid_input")],
)
def test_it_refuses_a_fork_from_a_missing_or_unrecorded_step(
    api: Api, at_seq: int, status: int, code: str
) -> None:
    _mission, run = make_mission()
    add_steps(run, 2, unfinished=1)

    response = api.post(f"/runs/{run.pk}/fork", {"at_seq": at_seq})

    assert (response.status_code, error_of(response)["code"]) == (status, code)
    assert Run.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_fork_through_the_api_replays_the_recorded_steps(api: Api, seeded_catalog: None) -> None:
    _mission, run = make_mission()
    assert Worker(lease_seconds=30).run_until_idle() == ["done"]
    recorded = list(Step.objects.filter(run=run).order_by("seq"))
    steps = api.get(f"/runs/{run.pk}/steps").json()["items"]
    assert [s["seq"] for s in steps] == [s.seq for s in recorded]

    fork_id = api.post(f"/runs/{run.pk}/fork", {"at_seq": recorded[0].seq}).json()["id"]
    assert Worker(lease_seconds=30).run_until_idle() == ["done"]

    fork = api.get(f"/runs/{fork_id}").json()
    assert fork["status"] == "done"
    assert fork["output"] == Run.objects.get(pk=run.pk).output
    first = api.get(f"/runs/{fork_id}/steps").json()["items"][0]
    assert (first["settled_by"], first["result"]) == ("forked", recorded[0].result)
