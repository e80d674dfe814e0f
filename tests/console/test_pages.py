"""Console pages of missions, runs and costs, on real rows: missions started through
`create_mission`, executed by a worker on the scripted model, steered through the forms."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals import service
from approvals.models import Question
from kernel import artifacts, runs
from kernel.models import Run, RunStatus, Step
from missions import costs, pricing
from missions.models import Mission, OwnerMessage
from tests.agentos.test_pages import INLINE_HANDLER, INLINE_SCRIPT, INLINE_STYLE, assert_strict_csp
from tests.console.factories import asking, launch, price_scripted, project, start_agent, work
from tests.factories import Owner, verified_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def priced() -> Iterator[None]:
    """The scripted model at a price; the cached price goes with the test's rolled-back row."""
    price_scripted()
    yield
    pricing._price_in_force.cache_clear()


DONE = [{"text": "Reading the changelog.", "reasoning": "The notes come from the changelog."}]


def finished_mission() -> tuple[Mission, Run]:
    """A mission whose run asked for a tool it does not have, was told so, and ended."""
    mission, run = launch(
        [
            {
                "text": "Let me look at the diff.",
                "reasoning": "The notes come from the changes.",
                "tool_calls": [{"name": "git_diff", "arguments": {"path": "NOTES.md"}}],
            },
            {"text": "The notes are written."},
        ]
    )
    assert work() == ["done"]
    run.refresh_from_db()
    return mission, run


def waiting_run(mission: Mission | None = None) -> Run:
    """A run that asked the owner a question and waits for the answer."""
    mission = mission or launch([{"text": "Fine."}])[0]
    run = start_agent(mission, [asking(), {"text": "Published."}], tools=["ask_owner"])
    work()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    return run


def text_of(response: Any) -> str:
    return str(response.content.decode())


# --- Home ---------------------------------------------------------------------------------------


def test_it_shows_running_missions_on_home(owner_client: Client) -> None:
    waiting = waiting_run()
    paused_mission, paused = launch([{"text": "Done."}], goal="Tidy the issue tracker")
    runs.pause_run(paused.pk)
    finished_mission()

    response = owner_client.get("/")

    content = text_of(response)
    items = response.context["running"].items
    assert [item.run.pk for item in items] == [paused.pk, waiting.pk]
    assert f'href="/missions/{paused_mission.pk}/">Tidy the issue tracker</a>' in content
    assert f'data-run-status="{paused.pk}">paused<' in content
    assert f'data-run-status="{waiting.pk}">waiting<' in content
    assert "scripted/scripted" in content
    assert f'href="/runs/{waiting.pk}/">Run {waiting.pk}</a>' in content
    assert "1 wait for you" in content
    assert 'href="/missions/new/">New mission</a>' in content
    assert re.search(r'id="running".*?Collected at <time datetime="[^"]+">', content, re.S)


def test_it_says_when_no_mission_runs(owner_client: Client) -> None:
    finished_mission()

    content = text_of(owner_client.get("/"))

    assert "No mission is running." in content


def test_it_shows_todays_spend_from_the_ledger_with_cached_tokens_apart(
    owner_client: Client, priced: None
) -> None:
    usage = {
        "input_tokens": 1000,
        "output_tokens": 200,
        "cache_read_tokens": 5000,
        "cache_write_tokens": 300,
    }
    launch([{"text": "Done.", "usage": usage}])
    assert work() == ["done"]

    response = owner_client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="spend")

    content = text_of(response)
    assert content.lstrip().startswith('<section class="card" id="spend"')
    # 1000 x $3 + 200 x $15 + 5000 x $0.30 + 300 x $3.75 per million tokens
    assert '<p class="figure" data-figure="usd">$0.008625</p>' in content
    assert "1,000 / 200" in content
    assert "5,000 read, 300 written" in content
    assert "Collected at" in content
    assert 'id="waiting"' not in content


def test_it_refreshes_only_the_running_card_for_htmx(owner_client: Client) -> None:
    run = waiting_run()

    content = text_of(owner_client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="running"))

    assert content.lstrip().startswith('<section class="card" id="running"')
    assert f'data-run-status="{run.pk}"' in content
    assert "agentos:runs from:body" in content
    assert "every 10s" in content
    assert "<html" not in content


# --- Missions -----------------------------------------------------------------------------------


def test_it_lists_missions_with_their_state_and_spend(owner_client: Client) -> None:
    mission, _ = finished_mission()
    waiting = waiting_run()

    content = text_of(owner_client.get("/missions/"))

    assert f'href="/missions/{mission.pk}/">Write the 1.3 release notes</a>' in content
    assert 'class="status status-up">done<' in content
    assert f'href="/missions/{waiting.account_id}/"' in content
    assert "2 root runs" in content  # the waiting run is the mission's second root
    assert 'href="/missions/new/"' in content


def test_it_offers_projects_and_models_on_the_new_mission_form(
    owner_client: Client, seeded_catalog: None
) -> None:
    project("website")

    content = text_of(owner_client.get("/missions/new/"))

    assert '<option value="' in content
    assert ">website</option>" in content
    assert '<option value="" selected>Default (anthropic/claude-opus-5-5)</option>' in content
    assert '<option value="scripted/scripted">scripted/scripted</option>' in content
    assert 'name="max_usd"' in content
    assert 'id="provider-keys"' in content


def test_it_starts_a_mission_from_the_form_through_the_one_creation_path(
    owner_client: Client, seeded_catalog: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")  # the run is created, never executed
    place = project()

    response = owner_client.post(
        "/missions/new/",
        {
            "project": place.pk,
            "goal": "  Write the 1.3 release notes  ",
            "definition_of_done": "NOTES.md is up to date.",
            "max_usd": "2.50",
            "max_turns": "30",
            "max_minutes": "90",
            "executor": "openai/gpt-6.1-sol",
            "bridges": ["git"],
            "allowed_hosts": "docs.example.org\n*.pypi.org:443",
            "sensitive": "on",
        },
    )

    mission = Mission.objects.get()
    assert response.status_code == 302
    assert (mission.bridges, mission.allowed_hosts, mission.sensitive) == (
        ["git"],
        ["*.pypi.org:443", "docs.example.org"],
        True,
    )
    assert response["Location"] == f"/missions/{mission.pk}/"
    assert mission.goal == "Write the 1.3 release notes"
    assert (mission.max_usd_micros, mission.max_turns, mission.max_tokens) == (2_500_000, 30, None)
    assert mission.routes == {
        "executor": {"provider": "openai", "model": "gpt-6.1-sol", "effort": None}
    }
    run = Run.objects.get(account=mission)
    assert run.contract["trigger"] == "console"
    assert run.model == "gpt-6.1-sol"
    assert (mission.max_seconds, run.max_seconds) == (5400, 5400)
    page = text_of(owner_client.get(response["Location"]))
    assert "NOTES.md is up to date." in page
    assert "$2.50" in page


def test_it_holds_a_mission_to_the_checks_typed_on_the_form(
    owner_client: Client, seeded_catalog: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")  # the run is created, never executed
    form = {"project": project().pk, "goal": "Write the notes", "executor": "openai/gpt-6.1-sol"}

    response = owner_client.post(
        "/missions/new/", {**form, "checks": "  The notes name every fix.\n\nThey fit a page."}
    )

    mission = Mission.objects.get()
    assert response.status_code == 302
    assert [(c["id"], c["description"], c["oracle"]) for c in mission.criteria] == [
        ("c1", "The notes name every fix.", {"evaluator": True}),
        ("c2", "They fit a page.", {"evaluator": True}),
    ]
    run = Run.objects.get(account=mission)
    assert run.input["stop_hook"] == "definition_of_done"
    assert run.input["criteria"] == mission.criteria
    page = text_of(owner_client.get(response["Location"]))
    assert '<ul class="criteria" id="mission-criteria">' in page
    assert "They fit a page." in page
    relaunch = text_of(owner_client.get(f"/missions/new/?from={mission.pk}"))
    assert "The notes name every fix.\nThey fit a page.</textarea>" in relaunch

    # A command runs in the project's repository: this project has none.
    refused = owner_client.post("/missions/new/", {**form, "checks": "$ make test"})
    assert refused.status_code == 400
    assert "this project has none" in text_of(refused)
    assert Mission.objects.count() == 1


def test_it_shows_why_a_mission_could_not_start_and_creates_nothing(
    owner_client: Client, seeded_catalog: None
) -> None:
    response = owner_client.post(
        "/missions/new/",
        {"project": project().pk, "goal": "Write the notes", "executor": "scripted/scripted"},
    )

    assert response.status_code == 400
    content = text_of(response)
    assert 'id="mission-error"' in content
    assert "This goal needs a language model" in content
    assert "the offline model only plays the offline missions" in content
    assert '<a href="/settings/">Set a provider key in Settings</a>' in content
    assert "Write the notes</textarea>" in content  # what was typed is kept
    assert not Mission.objects.exists()
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"goal": "  "}, "This field is required."),
        ({"max_usd": "-1"}, "Ensure this value is greater than or equal to 0."),
        ({"executor": "acme/rocket"}, "Select a valid choice."),
    ],
)
def test_it_refuses_a_bad_mission_form(
    owner_client: Client, seeded_catalog: None, fields: dict[str, str], message: str
) -> None:
    data = {"project": str(project().pk), "goal": "Write the notes", **fields}

    response = owner_client.post("/missions/new/", data)

    assert response.status_code == 400
    assert message in text_of(response)
    assert not Mission.objects.exists()


def test_it_fills_the_form_from_an_earlier_mission_to_relaunch(
    owner_client: Client, seeded_catalog: None
) -> None:
    mission, _ = launch(DONE, caps={"max_usd_micros": 1_500_000, "max_seconds": 1800})

    content = text_of(owner_client.get(f"/missions/new/?from={mission.pk}"))

    assert "Write the 1.3 release notes</textarea>" in content
    assert 'name="max_usd" value="1.5"' in content
    assert 'name="max_minutes" value="30"' in content
    assert '<option value="scripted/scripted" selected>' in content


def test_a_mission_keeps_its_risk_class_from_the_form_to_its_page_and_relaunch(
    owner_client: Client, seeded_catalog: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")  # runs are created, never executed here
    shop = project()
    form = text_of(owner_client.get("/missions/new/"))
    assert 'id="risk-class-choice"' in form
    assert 'name="risk_class" value="code" id="id_risk_class_1" checked' in form

    response = owner_client.post(
        "/missions/new/",
        {
            "project": str(shop.pk),
            "goal": "Survey the notes",
            "risk_class": "research",
        },
    )

    mission = Mission.objects.get()
    assert mission.risk_class == "research"
    assert Run.objects.get().input["sandbox_level"] == 0
    page = text_of(owner_client.get(f"/missions/{mission.pk}/"))
    assert 'Research (read-only) <span class="muted">(sandbox level 0)</span>' in page
    relaunch = text_of(owner_client.get(f"/missions/new/?from={mission.pk}"))
    assert 'name="risk_class" value="research" id="id_risk_class_0" checked' in relaunch
    assert response.status_code == 302


def test_it_says_a_mission_needs_a_project(owner_client: Client) -> None:
    content = text_of(owner_client.get("/missions/new/"))

    assert "there is none yet" in content
    assert 'href="/projects/"' in content


# --- Mission ------------------------------------------------------------------------------------


def test_it_shows_a_mission_with_its_budget_and_run_tree(owner_client: Client) -> None:
    mission, root = launch(DONE, caps={"max_usd_micros": 2_000_000, "max_turns": 10})
    work()
    fork = runs.fork_run(root.pk, at_seq=1)
    asks = waiting_run(mission)  # the fork is executed too
    child = runs.start_run(account=mission, program="agent", parent=Run.objects.get(pk=root.pk))

    response = owner_client.get(f"/missions/{mission.pk}/")

    content = text_of(response)
    nodes = response.context["tree"].nodes
    assert [(node.run.pk, node.depth) for node in nodes] == [
        (root.pk, 0),
        (child.pk, 1),
        (fork.pk, 0),
        (asks.pk, 0),
    ]
    assert "Write the 1.3 release notes" in content
    assert "NOTES.md lists every change since 1.2." in content
    assert f'<li class="tree-node tree-depth-1" data-run="{child.pk}">' in content
    assert f"forked from run {root.pk} at step 1" in content
    assert f'data-run-status="{root.pk}">done<' in content
    assert f'data-run-status="{child.pk}">queued<' in content
    question = Question.objects.get(run=asks)
    assert f'href="/questions/{question.pk}/">Waiting for you: question</a>' in content
    assert "<td>$2.00</td>" in content  # the spend cap
    assert "<td>10</td>" in content  # the turn cap
    assert "no cap" in content
    assert f"agentos:mission-{mission.pk} from:body" in content
    assert "every 10s" in content  # some runs are unfinished: a slow poll too
    assert 'href="/missions/new/?from=' in content


def test_it_refreshes_only_the_run_tree_for_htmx(owner_client: Client) -> None:
    mission, run = finished_mission()

    content = text_of(
        owner_client.get(
            f"/missions/{mission.pk}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="run-tree"
        )
    )

    assert content.lstrip().startswith('<div id="run-tree"')
    assert f'data-run-status="{run.pk}">done<' in content
    assert "every 10s" not in content  # every run has ended
    assert "<html" not in content


def test_it_lists_artifacts_and_serves_them_to_the_owner(owner_client: Client) -> None:
    mission, run = finished_mission()
    report = artifacts.store(
        content=b"# Notes\n", name="NOTES.md", media_type="text/plain", run=run
    )
    page = artifacts.store(
        content=b"<script>alert(1)</script>", name="page.html", media_type="text/html", run=run
    )

    content = text_of(owner_client.get(f"/missions/{mission.pk}/"))
    text = owner_client.get(f"/artifacts/{report.sha256}")
    html = owner_client.get(f"/artifacts/{page.sha256}")

    assert f'href="/artifacts/{report.sha256}">NOTES.md</a>' in content
    assert text.status_code == 200
    assert text["Content-Type"] == "text/plain"
    assert b"".join(text.streaming_content) == b"# Notes\n"  # type: ignore[attr-defined]
    assert text["Content-Disposition"].startswith("inline")
    assert html["Content-Type"] == "text/html"
    assert html["Content-Disposition"].startswith("attachment")  # never run as a page here
    assert html["X-Content-Type-Options"] == "nosniff"
    assert owner_client.get("/artifacts/" + "0" * 64).status_code == 404
    assert owner_client.get("/artifacts/not-a-hash").status_code == 404


def test_it_answers_404_for_an_unknown_mission_or_run(owner_client: Client) -> None:
    assert owner_client.get("/missions/999999/").status_code == 404
    assert owner_client.get("/runs/999999/").status_code == 404
    assert owner_client.post("/runs/999999/pause/").status_code == 404


# --- Run ----------------------------------------------------------------------------------------


def test_it_shows_a_run_timeline(owner_client: Client) -> None:
    mission, run = finished_mission()

    response = owner_client.get(f"/runs/{run.pk}/")

    content = text_of(response)
    assert [e.kind for e in response.context["timeline"].entries] == [
        "checkpoint",
        "model_call",
        "tool_call",
        "model_call",
    ]
    assert "[scripted offline model] Let me look at the diff." in content
    assert (
        '<details class="reasoning"><summary>Reasoning (summary)</summary>'
        '<p class="agent-text">The notes come from the changes.</p></details>'
    ) in content
    assert "Asks for: <code>git_diff</code>" in content
    assert "&quot;path&quot;: &quot;NOTES.md&quot;" in content  # the tool call's input
    # and its output: a run without a repository has no coding tools
    assert (
        "Unknown tool &#x27;git_diff&#x27;; tools: a2a_call, consult_advisor, delegate,"
        " ledger_fact, ledger_plan, ledger_update, ledger_view, memory_index, memory_invalidate,"
    ) in content
    assert 'class="step step-tool_call step-error"' in content
    assert 'id="run-answer">[scripted offline model] The notes are written.<' in content
    assert f'href="/missions/{mission.pk}/"' in content
    assert 'id="run-state">done<' in content
    assert content.count("?fork=") == 4  # fork from any recorded step
    assert 'id="steer"' not in content  # an ended run is not steered
    assert "every 10s" not in content


def test_it_shows_the_share_of_a_runs_input_read_from_the_prompt_cache(
    owner_client: Client,
) -> None:
    usage = {"input_tokens": 150, "cache_read_tokens": 1700, "cache_write_tokens": 151}
    _, run = launch([{"text": "The notes are written.", "usage": usage}])

    before = text_of(owner_client.get(f"/runs/{run.pk}/"))
    assert work() == ["done"]
    after = text_of(owner_client.get(f"/runs/{run.pk}/"))

    assert 'id="run-cache-share">no input yet<' in before
    # 1,700 of 2,001 is 84.96 %: rounded down, never better than it was.
    assert 'id="run-cache-share">84 % of input tokens read from the prompt cache<' in after
    assert "1,700 read, 151 written" in after


def test_it_shows_a_wait_under_way_with_a_link_to_answer(owner_client: Client) -> None:
    run = waiting_run()
    question = Question.objects.get(run=run)

    content = text_of(owner_client.get(f"/runs/{run.pk}/"))

    assert "Which branch should the notes go to?" in content
    assert f'<a class="btn btn-primary" href="/questions/{question.pk}/">Answer</a>' in content
    assert 'id="steer"' in content
    assert f"agentos:run-{run.pk} from:body" in content
    assert "every 10s" in content


def test_it_refreshes_the_timeline_and_the_status_in_one_htmx_request(
    owner_client: Client,
) -> None:
    run = waiting_run()

    content = text_of(
        owner_client.get(f"/runs/{run.pk}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="timeline")
    )

    assert content.lstrip().startswith('<section class="card" id="timeline"')
    assert '<section class="card" id="run-status" hx-swap-oob="true">' in content
    assert "<html" not in content
    assert 'id="steer"' not in content  # the message being typed is never replaced


def test_it_shows_an_answered_question_in_the_timeline(owner_client: Client) -> None:
    run = waiting_run()
    service.answer(Question.objects.get(run=run).pk, text="release")
    assert work() == ["done"]

    content = text_of(owner_client.get(f"/runs/{run.pk}/"))

    assert '<strong>answered</strong>: <span class="agent-text">release</span>' in content
    assert "The owner answered: release" not in content  # a tool result the model saw, not shown


def test_it_shows_a_stopped_runs_open_wait_as_never_finished(owner_client: Client) -> None:
    run = waiting_run()
    runs.request_stop(run.pk)
    assert work() == ["cancelled"]

    content = text_of(owner_client.get(f"/runs/{run.pk}/"))

    assert "no result: the run ended" in content
    assert "under way" not in content
    assert ">Answer</a>" not in content


# --- Steering -----------------------------------------------------------------------------------


def test_it_pauses_and_resumes_a_run(owner_client: Client) -> None:
    run = waiting_run()

    paused = owner_client.post(f"/runs/{run.pk}/pause/")

    assert paused.status_code == 302
    assert paused["Location"] == f"/runs/{run.pk}/"
    assert Run.objects.get(pk=run.pk).paused is True
    page = text_of(owner_client.get(paused["Location"]))
    assert "Paused. A step under way finishes first" in page
    assert 'id="run-state">paused<' in page
    assert f'action="/runs/{run.pk}/resume/"' in page

    resumed = owner_client.post(f"/runs/{run.pk}/resume/")

    assert resumed.status_code == 302
    assert Run.objects.get(pk=run.pk).paused is False
    assert "Resumed where it stopped." in text_of(owner_client.get(resumed["Location"]))


def test_it_sends_a_message_that_the_next_model_step_delivers(owner_client: Client) -> None:
    run = waiting_run()

    response = owner_client.post(
        f"/runs/{run.pk}/message/", {"text": "Publish to the release branch only."}
    )

    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/#steer"
    message = OwnerMessage.objects.get(run=run)
    assert (message.text, message.delivered_seq) == ("Publish to the release branch only.", None)
    page = text_of(owner_client.get(f"/runs/{run.pk}/"))
    assert "not delivered yet" in page

    service.answer(Question.objects.get(run=run).pk, text="release")
    assert work() == ["done"]

    message.refresh_from_db()
    assert message.delivered_seq is not None
    step = Step.objects.get(run=run, seq=message.delivered_seq)
    assert step.kind == "model_call"
    assert isinstance(step.result, dict)
    assert step.result["owner_messages"] == ["Publish to the release branch only."]
    page = text_of(owner_client.get(f"/runs/{run.pk}/"))
    assert f"delivered at step {step.seq}" in page
    assert (
        '<strong>Your message:</strong> <span class="agent-text">'
        "Publish to the release branch only.</span>"
    ) in page


def test_it_interrupts_the_current_step_with_a_message(owner_client: Client) -> None:
    run = waiting_run()

    owner_client.post(f"/runs/{run.pk}/message/", {"text": "Stop that.", "interrupt": "on"})

    assert Run.objects.get(pk=run.pk).interrupt_requested is True
    assert OwnerMessage.objects.filter(run=run, text="Stop that.").exists()


def test_it_asks_before_stopping_a_run(owner_client: Client) -> None:
    run = waiting_run()

    asked = owner_client.get(f"/runs/{run.pk}/?confirm=stop")
    unconfirmed = owner_client.post(f"/runs/{run.pk}/stop/")

    assert 'id="stop"' in text_of(asked)
    assert f"Yes, stop run {run.pk}" in text_of(asked)
    assert unconfirmed.status_code == 200
    assert 'name="confirm" value="yes"' in text_of(unconfirmed)
    assert Run.objects.get(pk=run.pk).cancel_requested is False

    stopped = owner_client.post(f"/runs/{run.pk}/stop/", {"confirm": "yes"})

    assert stopped.status_code == 302
    assert Run.objects.get(pk=run.pk).cancel_requested is True
    assert "Stop requested for 1 run(s)" in text_of(owner_client.get(stopped["Location"]))
    assert work() == ["cancelled"]
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_it_forks_a_run_from_a_step(owner_client: Client) -> None:
    _, run = finished_mission()

    response = owner_client.post(f"/runs/{run.pk}/fork/", {"seq": "2", "confirm": "yes"})

    fork = Run.objects.exclude(pk=run.pk).get()
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{fork.pk}/"
    assert fork.contract["forked_from"] == {"run": run.pk, "seq": 2}
    copied = Step.objects.filter(run=fork).order_by("seq")
    assert [(s.seq, s.settled_by) for s in copied] == [(1, "forked"), (2, "forked")]
    page = text_of(owner_client.get(response["Location"]))
    assert f"starts from step 2 of run {run.pk}" in page
    assert f'href="/runs/{run.pk}/#step-2">Run {run.pk}, step 2</a>' in page
    assert "copied from the source run" in page


def test_model_calls_count_only_the_calls_a_run_made(owner_client: Client) -> None:
    _, run = finished_mission()  # two model calls: the diff's turn, then the answer
    fork = runs.fork_run(run.pk, at_seq=2)  # copies the first call and the tool call
    assert work() == ["done"]  # then makes one call of its own

    report = costs.report()
    assert report.total.calls == 3
    assert costs.today().spend.calls == 3
    assert {row.run_id: row.spend.calls for row in report.runs} == {run.pk: 2, fork.pk: 1}
    content = text_of(owner_client.get("/costs/"))
    assert "<dt>Model calls</dt><dd>3</dd>" in content


@pytest.mark.parametrize(
    ("path", "data", "status", "message"),
    [
        ("message", {"text": "Go on."}, 409, "has ended (done); start a new one."),
        ("pause", {}, 409, "has ended (done); it cannot be paused or resumed."),
        ("resume", {}, 409, "has ended (done); it cannot be paused or resumed."),
        ("stop", {"confirm": "yes"}, 409, "has ended (done): there is nothing to stop."),
        ("fork", {"seq": "99", "confirm": "yes"}, 404, "has no step 99."),
        ("fork", {"seq": "zero"}, 400, "Fork from which step?"),
    ],
)
def test_it_shows_a_steering_refusal_plainly(
    owner_client: Client, path: str, data: dict[str, str], status: int, message: str
) -> None:
    _, run = finished_mission()

    response = owner_client.post(f"/runs/{run.pk}/{path}/", data)

    assert response.status_code == status
    content = text_of(response)
    assert 'id="steer-error"' in content
    assert message in content
    assert not OwnerMessage.objects.exists()
    assert Run.objects.count() == 1
    assert Run.objects.get(pk=run.pk).paused is False


def test_it_refuses_an_empty_message(owner_client: Client) -> None:
    run = waiting_run()

    response = owner_client.post(f"/runs/{run.pk}/message/", {"text": "   "})

    assert response.status_code == 400
    assert "This field is required." in text_of(response)
    assert not OwnerMessage.objects.exists()


def test_it_checks_csrf_on_steering(owner: Owner) -> None:
    run = waiting_run()
    client = verified_client(owner, Client(enforce_csrf_checks=True))

    for path, data in [
        ("message", {"text": "Go on."}),
        ("pause", {}),
        ("stop", {"confirm": "yes"}),
        ("fork", {"seq": "1"}),
    ]:
        assert client.post(f"/runs/{run.pk}/{path}/", data).status_code == 403
    run.refresh_from_db()
    assert (run.paused, run.cancel_requested) == (False, False)
    assert not OwnerMessage.objects.exists()
    assert Run.objects.filter(account=run.account).count() == 2


def test_it_sends_strangers_to_sign_in(client: Client) -> None:
    mission, run = finished_mission()
    stored = artifacts.store(content=b"x", name="x.txt", media_type="text/plain", run=run)

    for path in [
        "/missions/",
        "/missions/new/",
        f"/missions/{mission.pk}/",
        f"/runs/{run.pk}/",
        f"/artifacts/{stored.sha256}",
        "/costs/",
    ]:
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/login/?next="), path
    client.post(f"/runs/{run.pk}/fork/", {"seq": "1", "confirm": "yes"})
    assert Run.objects.count() == 1


# --- Costs --------------------------------------------------------------------------------------


def test_it_shows_spend_per_mission_model_and_day(owner_client: Client, priced: None) -> None:
    usage = {"input_tokens": 2000, "output_tokens": 100, "cache_read_tokens": 10_000}
    first, _ = launch([{"text": "Done.", "usage": usage}], goal="Write the notes")
    second, _ = launch(
        [{"text": "Done.", "usage": {"input_tokens": 1000, "output_tokens": 0}}],
        goal="Tidy the tracker",
    )
    assert work() == ["done", "done"]

    response = owner_client.get("/costs/")

    content = text_of(response)
    report = response.context["report"]
    # 2000 x $3 + 100 x $15 + 10000 x $0.30 per million = 10 500 µ$; then 1000 x $3 = 3000 µ$
    assert [(row.mission_id, row.spend.usd_micros) for row in report.missions] == [
        (first.pk, 10_500),
        (second.pk, 3_000),
    ]
    assert [(row.model, row.spend.calls, row.spend.usd_micros) for row in report.models] == [
        ("scripted", 2, 13_500)
    ]
    assert [(row.mission_id, row.spend.usd_micros, row.goal) for row in report.runs] == [
        (first.pk, 10_500, "Write the notes"),
        (second.pk, 3_000, "Tidy the tracker"),
    ]
    assert f'href="/runs/{report.runs[0].run_id}/trace/"' in response.content.decode()
    assert len(report.days) == 1
    assert report.days[0].spend.cache_read_tokens == 10_000
    assert report.total.usd_micros == 13_500
    assert "10,000 read, 0 written" in content
    assert [item.mission_id for item in report.completed] == [second.pk, first.pk]
    assert report.completed_average_usd_micros == 6_750
    assert '<p class="figure">$0.00675 ' in content
    assert "Collected at" in content


def test_it_says_when_nothing_was_spent(owner_client: Client) -> None:
    content = text_of(owner_client.get("/costs/"))

    assert "No mission was completed in these 30 days." in content
    assert "Nothing was spent." in content


# --- Every page ---------------------------------------------------------------------------------


def test_it_renders_every_page_with_a_strict_csp_and_no_inline_code(owner_client: Client) -> None:
    mission, run = finished_mission()
    waiting = waiting_run(mission)
    project("website")

    for path in [
        "/",
        "/missions/",
        "/missions/new/",
        f"/missions/{mission.pk}/",
        f"/runs/{run.pk}/",
        f"/runs/{waiting.pk}/?confirm=stop",
        "/costs/",
    ]:
        response = owner_client.get(path)
        assert response.status_code == 200, path
        assert_strict_csp(response)
        assert not INLINE_SCRIPT.search(response.content), path
        assert not INLINE_HANDLER.search(response.content), path
        assert not INLINE_STYLE.search(response.content), path


# --- Query counts of the live refreshes ---------------------------------------------------------


def refresh_queries(client: Client, path: str, target: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=target)
    assert response.status_code == 200
    return len(queries)


def test_the_live_refreshes_cost_the_same_queries_however_long_the_run(
    owner_client: Client,
) -> None:
    # Each call its own (the same call three times in a row is a stall, and asks the owner).
    turns = [
        {"text": "Looking.", "tool_calls": [{"name": "git_diff", "arguments": {"page": n}}]}
        for n in range(6)
    ]
    short_mission, short = launch([{"text": "Done."}])
    long_mission, long = launch([*turns, {"text": "Done."}])
    assert work() == ["done", "done"]

    assert refresh_queries(owner_client, f"/runs/{long.pk}/", "timeline") == refresh_queries(
        owner_client, f"/runs/{short.pk}/", "timeline"
    )
    assert refresh_queries(
        owner_client, f"/missions/{long_mission.pk}/", "run-tree"
    ) == refresh_queries(owner_client, f"/missions/{short_mission.pk}/", "run-tree")


def test_the_running_card_costs_the_same_queries_however_many_missions_run(
    owner_client: Client,
) -> None:
    waiting_run()
    one = refresh_queries(owner_client, "/", "running")
    for _ in range(3):
        waiting_run()

    assert refresh_queries(owner_client, "/", "running") == one
