"""On a phone, against the real stack: a mission run by a supervisor with sub-agents shows its
run tree (who does what, with which model, for how much) and its ledger (plan items with owner,
status and proof, facts); a sub-agent's change reaches the open page without a reload. No
horizontal scroll at 390 by 844, no serious accessibility violation."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from approvals import service
from approvals.models import Question
from kernel import runs
from kernel.models import Run
from missions.ledger import LEDGER_TOOL_NAMES
from missions.models import Mission, PlanItem, Project
from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack
from tests.polling import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_MS = 25_000
GOAL = "Make the parser accept trailing commas"
LONG_TITLE = "Read the parser's documentation and its tests, end to end, " * 3


def start(mission: Mission, turns: list[dict[str, Any]], **extra: Any) -> Run:
    """The real agent loop on the offline scripted model, with the ledger and owner tools."""
    return runs.start_run(
        account=mission,
        program="agent",
        model="scripted",
        input={
            "goal": GOAL,
            "provider": "scripted",
            "model": "scripted",
            "tools": [*LEDGER_TOOL_NAMES, "ask_owner"],
            "script": {"turns": turns},
            **extra.pop("input", {}),
        },
        **extra,
    )


def ask(question: str) -> dict[str, Any]:
    return {
        "text": "Waiting.",
        "tool_calls": [{"name": "ask_owner", "arguments": {"question": question}}],
    }


def asked(run: Run) -> Question:
    return wait_for(
        lambda: Question.objects.filter(run=run, state="open").first(),
        timeout=30,
        message="the agent to ask a question",
        interval=0.2,
    )


def test_the_mission_shows_its_run_tree_and_its_ledger_live_on_a_phone(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    assert stack.wait_for_workers()["workers"]["state"] == "up", stack.log()
    project, _ = Project.objects.get_or_create(name="parser")
    mission = Mission.objects.create(project=project, goal=GOAL)
    plan = {
        "name": "ledger_plan",
        "arguments": {
            "items": [
                {"key": "read-docs", "title": LONG_TITLE.strip(), "owner": "reader"},
                {"key": "fix-parser", "title": "Fix the parser", "owner": "writer"},
            ]
        },
    }
    fact = {"name": "ledger_fact", "arguments": {"text": "The parser is parser/core.py."}}
    root = start(
        mission,
        [{"text": "Planning.", "tool_calls": [plan, fact]}, ask("Go on?"), {"text": "Done."}],
    )
    wait_for(
        lambda: PlanItem.objects.filter(mission=mission).count() == 2,
        timeout=30,
        message="the plan's two items",
        interval=0.2,
    )
    doing = {"name": "ledger_update", "arguments": {"key": "read-docs", "status": "doing"}}
    proof = {"files": ["docs/parser.md"], "tests": ["tests/test_parser.py::test_commas"]}
    done = {
        "name": "ledger_update",
        "arguments": {"key": "read-docs", "status": "done", "proof": proof},
    }
    reader = start(
        mission,
        [
            {"text": "Reading.", "tool_calls": [doing]},
            ask("May I finish?"),
            {"text": "Finishing.", "tool_calls": [done]},
            {"text": "Done."},
        ],
        parent=root,
        input={"contract": {"name": "reader"}, "role": "planner"},
    )
    writer = start(
        mission, [ask("Which branch?")], parent=root, input={"contract": {"name": "writer"}}
    )
    helper = start(mission, [ask("Which file?")], parent=reader)
    question = asked(reader)
    for run in (root, writer, helper):
        asked(run)

    sign_in(page, stack, live_owner)
    page.goto(f"{stack.url}/missions/{mission.pk}/")
    tree = page.locator("#run-tree")
    for run, depth in ((root, 0), (reader, 1), (writer, 1), (helper, 2)):
        node = tree.locator(f'li.tree-depth-{depth}[data-run="{run.pk}"]')
        expect(node).to_be_visible()
        expect(node.locator(f'[data-run-status="{run.pk}"]')).to_have_text("waiting")
        expect(node).to_contain_text("scripted/scripted")
        expect(node).to_contain_text("tokens")
        expect(node.get_by_role("link", name=f"Run {run.pk} ·")).to_have_attribute(
            "href", f"/runs/{run.pk}/"
        )
    expect(tree.locator(f'[data-run="{reader.pk}"]')).to_contain_text(f"Run {reader.pk} · planner")
    ledger = page.locator("#ledger")
    expect(ledger.locator('[data-plan-status="read-docs"]')).to_have_text("in progress")
    expect(ledger.locator('[data-plan-status="fix-parser"]')).to_have_text("to do")
    expect(ledger.locator('[data-plan-item="read-docs"]')).to_contain_text(f"run {reader.pk}")
    expect(ledger.locator('[data-plan-item="fix-parser"]')).to_contain_text(
        "for the sub-agent “writer”"
    )
    expect(ledger).to_contain_text("0 of 2 done")
    expect(ledger.locator("#ledger-facts")).to_contain_text("The parser is parser/core.py.")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    screenshot(page, "mission-ledger")

    # The reader finishes its item while the page is open: it shows without a reload.
    page.evaluate("() => { window.agentosSamePage = true; }")
    service.answer(question.pk, text="Yes.")
    expect(ledger.locator('[data-plan-status="read-docs"]')).to_have_text("done", timeout=LIVE_MS)
    # The section was swapped: find it again.
    ledger = page.locator("#ledger")
    item = ledger.locator('[data-plan-item="read-docs"]')
    expect(item).to_contain_text("docs/parser.md")
    expect(item).to_contain_text("tests/test_parser.py::test_commas")
    expect(item).to_contain_text("Tests passed")
    expect(ledger).to_contain_text("1 of 2 done")
    assert page.evaluate("() => window.agentosSamePage") is True
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    screenshot(page, "mission-ledger-live")
    assert_accessible(page)
    assert page.csp_violations == []  # type: ignore[attr-defined]
