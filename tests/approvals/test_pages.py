from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from approvals import service
from approvals.models import Approval
from kernel.models import RunStatus, Wait, WaitState
from kernel.worker import Worker
from tests.agentos.test_pages import (
    INLINE_HANDLER,
    INLINE_SCRIPT,
    INLINE_STYLE,
    assert_strict_csp,
)
from tests.approvals.factories import (
    DIFF,
    answer_of,
    approval_request,
    make_approval,
    make_mission,
    make_question,
    start_asking,
)
from tests.factories import Owner, verified_client
from tools.models import Decision, PermissionRule


def git_push_approval(**kwargs: Any) -> Approval:
    return make_approval(
        tool="git_push",
        arguments={"remote": "origin", "branch": "main"},
        preview={"commit": "a9c4f2e1d0", "remote_was": None, "diff": DIFF},
        **kwargs,
    )


def decide(client: Client, approval: Approval, decision: str, **fields: str) -> Any:
    data = {"args_hash": approval.request["args_hash"], "decision": decision, **fields}
    return client.post(f"/approvals/{approval.pk}/", data)


def test_it_lists_pending_approvals_first_then_settled_ones(owner_client: Client) -> None:
    refused = make_approval(arguments={"command": "make clean"})
    service.decide(refused.pk, approve=False, args_hash=refused.request["args_hash"])
    expired = make_approval(arguments={"command": "make publish"}, due_in=timedelta(hours=-2))
    pending = git_push_approval()
    question = make_question()

    response = owner_client.get("/approvals/")

    assert response.status_code == 200
    waiting = response.context["waiting"].items
    settled = response.context["settled"].items
    assert [(item.kind, item.pk) for item in waiting] == [
        ("question", question.pk),
        ("approval", pending.pk),
    ]
    assert {item.pk for item in settled} == {refused.pk, expired.pk}
    content = response.content.decode()
    assert content.index("origin main") < content.index("make clean")
    assert f'href="/approvals/{pending.pk}/"' in content
    assert f'href="/questions/{question.pk}/"' in content
    assert "Mission: Publish the 1.3 release notes" in content
    assert "expires in 6\xa0days" in content
    assert "expired 2\xa0hours ago" in content
    assert 'class="status status-refused">refused<' in content
    assert "Collected at" in content


def test_it_says_when_nothing_waits(owner_client: Client) -> None:
    content = owner_client.get("/approvals/").content.decode()

    assert "Nothing waits for you." in content
    assert "Nothing was decided yet." in content


def test_it_refreshes_only_the_lists_for_htmx(owner_client: Client) -> None:
    make_approval()

    content = owner_client.get("/approvals/", HTTP_HX_REQUEST="true").content.decode()

    assert content.lstrip().startswith('<div id="queue"')
    assert "make deploy" in content
    assert "<html" not in content


def test_it_shows_the_exact_call_its_justification_and_its_diff(owner_client: Client) -> None:
    approval = git_push_approval(justification="Publishes <b>the notes</b>\nhttps://evil.test")

    response = owner_client.get(f"/approvals/{approval.pk}/")

    assert response.status_code == 200
    content = response.content.decode()
    assert "{\n  &quot;tool&quot;: &quot;git_push&quot;,\n  &quot;arguments&quot;: {" in content
    assert "&quot;branch&quot;: &quot;main&quot;" in content
    assert "Publishes &lt;b&gt;the notes&lt;/b&gt;\nhttps://evil.test" in content
    assert '<a href="https://evil.test' not in content  # agent text never becomes a link
    assert '<span class="diff-add">+Version 1.3</span>' in content
    assert '<span class="diff-del">-Version 1.2</span>' in content
    assert '<span class="diff-hunk">@@ -1,3 +1,3 @@</span>' in content
    assert "a9c4f2e1d0" in content
    assert f'name="args_hash" value="{approval.request["args_hash"]}"' in content
    assert 'value="approve"' in content
    assert 'value="refuse"' in content
    assert "Always allow this in this project" in content
    assert re.search(r"in 6\xa0days", content)


@pytest.mark.parametrize("page", ["queue", "approval", "question"])
def test_it_renders_with_a_strict_csp_and_no_inline_code(owner_client: Client, page: str) -> None:
    paths = {
        "queue": "/approvals/",
        "approval": f"/approvals/{git_push_approval().pk}/",
        "question": f"/questions/{make_question(choices=['main']).pk}/",
    }

    response = owner_client.get(paths[page])

    assert response.status_code == 200
    assert_strict_csp(response)
    assert not INLINE_SCRIPT.search(response.content)
    assert not INLINE_HANDLER.search(response.content)
    assert not INLINE_STYLE.search(response.content)


@pytest.mark.parametrize(
    ("settle", "status"),
    [
        ("approve", "approved"),
        ("refuse", "refused"),
        ("expire", "expired"),
        ("expire-unseen", "expired"),
    ],
)
def test_it_shows_a_settled_approval_without_buttons(
    owner_client: Client, settle: str, status: str
) -> None:
    due_in = timedelta(hours=-1) if settle == "expire-unseen" else timedelta(days=1)
    approval = make_approval(due_in=due_in)
    if settle in ("approve", "refuse"):
        service.decide(
            approval.pk, approve=settle == "approve", args_hash=approval.request["args_hash"]
        )
    elif settle == "expire":  # as the kernel marks it when the run looks at its wait
        Wait.objects.filter(pk=approval.pk).update(state=WaitState.EXPIRED)

    content = owner_client.get(f"/approvals/{approval.pk}/").content.decode()

    assert f'class="status status-{status}" id="approval-status"' in content
    assert 'id="outcome"' in content
    assert 'name="decision"' not in content
    assert 'name="args_hash"' not in content


def test_it_answers_404_for_an_unknown_approval_or_question(owner_client: Client) -> None:
    question = make_question()
    approval = make_approval()

    assert owner_client.get("/approvals/999999/").status_code == 404
    assert owner_client.get(f"/approvals/{question.pk}/").status_code == 404
    assert owner_client.get(f"/questions/{approval.pk}/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_it_approves_through_the_form_and_the_run_goes_on(owner: Owner) -> None:
    client = verified_client(owner)
    mission = make_mission()
    request = approval_request(mission)
    run = start_asking(request, mission=mission)
    assert Worker(lease_seconds=30).run_until_idle() == ["waiting"]
    approval = Approval.objects.get(run=run)

    response = decide(client, approval, "approve")

    assert response.status_code == 302
    assert response["Location"] == f"/approvals/{approval.pk}/"
    wait = Wait.objects.get(pk=approval.pk)
    assert wait.state == WaitState.ANSWERED
    assert answer_of(wait.pk)["approved"] is True
    assert answer_of(wait.pk)["args_hash"] == request["args_hash"]
    page = client.get(response["Location"]).content.decode()
    assert 'class="status status-approved" id="approval-status">approved<' in page
    assert "the run goes on with it" in page
    assert Worker(lease_seconds=30).run_until_idle() == ["done"]
    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    assert run.output == {"answer": answer_of(wait.pk)}


def test_it_refuses_through_the_form_with_a_note(owner_client: Client) -> None:
    approval = make_approval()

    response = decide(owner_client, approval, "refuse", note="Not before Monday.")

    assert response.status_code == 302
    wait = Wait.objects.get(pk=approval.pk)
    assert wait.answer == {
        "approved": False,
        "args_hash": approval.request["args_hash"],
        "always": False,
        "note": "Not before Monday.",
    }
    page = owner_client.get(f"/approvals/{approval.pk}/").content.decode()
    assert "You refused this call" in page
    assert "Not before Monday." in page
    assert not PermissionRule.objects.exists()


def test_it_always_allows_through_the_form(owner_client: Client) -> None:
    approval = git_push_approval()

    decide(owner_client, approval, "always")

    assert answer_of(approval.pk)["approved"] is True
    rule = PermissionRule.objects.get()
    assert rule.project_id == approval.request["project_id"]
    assert (rule.tool, rule.pattern, rule.decision) == ("git_push", "origin main", Decision.ALLOW)
    page = owner_client.get(f"/approvals/{approval.pk}/").content.decode()
    assert "A rule now lets the same call run without asking in project approvals tests." in page


def test_it_offers_always_only_for_a_known_tool_in_a_project(owner_client: Client) -> None:
    approval = make_approval(tool="some_mcp_tool", arguments={"x": 1})

    content = owner_client.get(f"/approvals/{approval.pk}/").content.decode()

    assert 'value="approve"' in content
    assert 'value="always"' not in content


def test_it_tells_why_a_decision_was_refused(owner_client: Client) -> None:
    stale = make_approval()
    late = make_approval(arguments={"command": "make late"}, due_in=timedelta(seconds=-1))
    twice = make_approval(arguments={"command": "make twice"})
    decide(owner_client, twice, "refuse")

    wrong_hash = owner_client.post(
        f"/approvals/{stale.pk}/", {"args_hash": "0" * 64, "decision": "approve"}
    )
    expired = decide(owner_client, late, "approve")
    again = decide(owner_client, twice, "approve")

    assert wrong_hash.status_code == 409
    assert "The call changed since this page was shown." in wrong_hash.content.decode()
    assert Wait.objects.get(pk=stale.pk).state == WaitState.OPEN
    assert expired.status_code == 409
    assert "counts as a refusal" in expired.content.decode()
    assert again.status_code == 409
    assert "already settled" in again.content.decode()
    assert answer_of(twice.pk)["approved"] is False


def test_it_refuses_a_form_without_a_decision(owner_client: Client) -> None:
    approval = make_approval()

    response = owner_client.post(
        f"/approvals/{approval.pk}/", {"args_hash": approval.request["args_hash"]}
    )

    assert response.status_code == 400
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN


def test_it_checks_csrf_on_decisions(owner: Owner) -> None:
    approval = make_approval()
    client = verified_client(owner, Client(enforce_csrf_checks=True))

    response = decide(client, approval, "approve")

    assert response.status_code == 403
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN


def test_it_sends_strangers_to_sign_in(client: Client, db: None) -> None:
    approval = make_approval()
    question = make_question()

    for path in ["/approvals/", f"/approvals/{approval.pk}/", f"/questions/{question.pk}/"]:
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/?next=")
    decide(client, approval, "approve")
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN


# --- questions ----------------------------------------------------------------------------------


def test_it_shows_a_question_with_its_choices(owner_client: Client) -> None:
    question = make_question(choices=["main", "release"])

    response = owner_client.get(f"/questions/{question.pk}/")

    content = response.content.decode()
    assert "Which branch should the notes go to?" in content
    assert '<button type="submit" name="text" value="main">main</button>' in content
    assert '<textarea name="text"' in content


def test_it_answers_with_a_choice(owner_client: Client) -> None:
    question = make_question(choices=["main", "release"])

    response = owner_client.post(f"/questions/{question.pk}/", {"text": "release"})

    assert response.status_code == 302
    wait = Wait.objects.get(pk=question.pk)
    assert (wait.state, wait.answer) == (WaitState.ANSWERED, {"text": "release"})
    page = owner_client.get(f"/questions/{question.pk}/").content.decode()
    assert 'id="question-status">answered<' in page
    assert "<textarea" not in page


def test_it_refuses_an_empty_answer(owner_client: Client) -> None:
    question = make_question()

    response = owner_client.post(f"/questions/{question.pk}/", {"text": "   "})

    assert response.status_code == 400
    assert "This field is required." in response.content.decode()
    assert Wait.objects.get(pk=question.pk).state == WaitState.OPEN


def test_it_shows_an_expired_question_without_a_form(owner_client: Client) -> None:
    question = make_question(due_in=timedelta(minutes=-5))

    content = owner_client.get(f"/questions/{question.pk}/").content.decode()
    late = owner_client.post(f"/questions/{question.pk}/", {"text": "main"})

    assert 'id="question-status">expired (refused)<' in content
    assert "<textarea" not in content
    assert late.status_code == 409
    assert Wait.objects.get(pk=question.pk).state == WaitState.OPEN


# --- Home ---------------------------------------------------------------------------------------


def test_it_shows_what_waits_on_home(owner_client: Client) -> None:
    question = make_question()
    approval = git_push_approval()
    decided = make_approval(arguments={"command": "make clean"})
    service.decide(decided.pk, approve=True, args_hash=decided.request["args_hash"])

    response = owner_client.get("/")

    content = response.content.decode()
    assert [item.pk for item in response.context["waiting"].items] == [approval.pk, question.pk]
    # Titled by what approving does, not by the tool's name.
    assert f'href="/approvals/{approval.pk}/">Push to origin main</a>' in content
    assert f'href="/questions/{question.pk}/">Question</a>' in content
    assert "make clean" not in content
    assert re.search(r'Collected at <time datetime="[^"]+">', content)
    assert 'data-component="database">up<' in content  # the health card still works


def test_it_says_when_nothing_waits_on_home(owner_client: Client) -> None:
    content = owner_client.get("/").content.decode()

    assert "Nothing waits for you." in content


def test_it_refreshes_only_the_waiting_card_for_htmx(owner_client: Client) -> None:
    approval = make_approval()

    response = owner_client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="waiting")

    content = response.content.decode()
    assert content.lstrip().startswith('<section class="card" id="waiting"')
    assert f"/approvals/{approval.pk}/" in content
    assert "<html" not in content
    assert 'id="health"' not in content
