"""The console's rough edges, on the server's side: what each page says and in which order, the
forms that open on their first error, the push sender's form, the admin of a single owner. What
needs a browser (widths, what is in view, taps) is in tests/browser/test_rough_edges_browser.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.http import HttpResponse
from django.http.response import HttpResponseBase
from django.test import Client
from django.urls import NoReverseMatch, reverse

from agentos.core.models import AuditEvent, PushState
from approvals import push, push_sender
from kernel.models import Run
from memory import store
from memory.store import Draft
from missions.models import Project
from tests.console.factories import launch, project, work
from tools import remotes
from tools.models import RemoteCredential

pytestmark = pytest.mark.django_db

ANSWER = "The notes list 14 changes since 1.2."


def text_of(response: HttpResponseBase) -> str:
    assert isinstance(response, HttpResponse)
    return response.content.decode()


def finished() -> tuple[int, Run]:
    mission, root = launch([{"text": ANSWER}])
    work()
    root.refresh_from_db()
    assert root.is_terminal, root.status
    return mission.pk, root


# --- Mission: its result, its relaunch, no plan waited for -----------------------------------


def test_it_shows_a_missions_result_first_and_no_plan_yet_for_a_finished_single_agent(
    owner_client: Client,
) -> None:
    mission, _root = finished()

    page = text_of(owner_client.get(f"/missions/{mission}/"))

    # The offline scripted model marks its answer as its own.
    assert re.search(
        rf'<p class="agent-text" id="mission-answer">[^<]*{re.escape(ANSWER)}</p>', page
    )
    assert "No plan yet" not in page
    assert 'id="no-plan"' in page
    # Relaunch, then the result, come before the run tree and the definition of done.
    assert page.index('id="relaunch"') < page.index('id="mission-result"') < page.index("Runs<")
    assert page.index('id="mission-result"') < page.index("Definition of done</h2>")


def test_it_shows_each_criterions_verdict_with_the_evidence_of_one_that_did_not_pass(
    owner_client: Client,
) -> None:
    mission, root = finished()
    # The output the stop hook leaves (`missions.verification.check`): criteria and what is missing.
    Run.objects.filter(pk=root.pk).update(
        output={
            "answer": ANSWER,
            "criteria": [
                {"id": "c1", "description": "NOTES.md exists", "passes": True},
                {"id": "c2", "description": "Every change is listed", "passes": False},
            ],
            "missing": [{"id": "c2", "description": "x", "evidence": "1.2.3 is not listed"}],
        }
    )

    page = text_of(owner_client.get(f"/missions/{mission}/"))

    verdicts = page[page.index('id="mission-verdicts"') :]
    assert re.search(r"NOTES.md exists</span>\s*<span class=\"status status-up\">passed", verdicts)
    assert re.search(
        r"Every change is listed</span>\s*<span class=\"status status-down\">not passed", verdicts
    )
    assert "1.2.3 is not listed" in verdicts


def test_it_still_waits_for_a_plan_while_the_mission_runs(owner_client: Client) -> None:
    mission, _root = launch([{"text": ANSWER}])  # not executed: its run is queued

    page = text_of(owner_client.get(f"/missions/{mission.pk}/"))

    assert "No plan yet: the mission's supervisor writes it." in page
    assert 'id="mission-result"' not in page


def test_a_relaunch_offers_start_before_the_form(owner_client: Client) -> None:
    mission, _root = finished()

    page = text_of(owner_client.get(f"/missions/new/?from={mission}"))

    top = page.index('id="relaunch-start"')
    assert top < page.index('name="goal"')
    assert page.index('type="submit"', top) < page.index('name="goal"')
    assert "Write the 1.3 release notes" in page  # the goal, prefilled
    plain = text_of(owner_client.get("/missions/new/"))
    assert 'id="relaunch-start"' not in plain


# --- Run: the answer and Stop before the hashes ----------------------------------------------


def test_the_run_page_puts_the_answer_before_its_folded_facts(owner_client: Client) -> None:
    _mission, root = finished()

    page = text_of(owner_client.get(f"/runs/{root.pk}/"))

    assert (
        page.index('id="run-answer"') < page.index('id="run-facts"') < page.index('id="run-engine"')
    )
    assert re.search(r'<details class="run-facts" id="run-facts"[^>]*>\s*<summary>', page)


def test_the_run_page_puts_stop_before_its_folded_facts(owner_client: Client) -> None:
    _mission, root = launch([{"text": ANSWER}])  # queued: it may be stopped

    page = text_of(owner_client.get(f"/runs/{root.pk}/"))

    assert page.index("?confirm=stop#stop") < page.index('id="run-facts"')


# --- Forms open on their first error ---------------------------------------------------------


def test_a_refused_form_opens_on_its_first_invalid_field(owner_client: Client) -> None:
    project()

    response = owner_client.post("/missions/new/", {"goal": ""})

    assert response.status_code == 400
    page = text_of(response)
    focused = re.findall(r"<(?:input|select|textarea)[^>]*autofocus[^>]*>", page)
    assert len(focused) == 1, focused
    assert 'aria-invalid="true"' in focused[0]


def test_a_form_shown_the_first_time_focuses_nothing(owner_client: Client) -> None:
    project()

    page = text_of(owner_client.get("/missions/new/"))

    assert "autofocus" not in page


# --- Settings: the push sender, the token shown once with Copy ----------------------------


def test_it_saves_the_push_senders_contact_and_uses_it(owner_client: Client) -> None:
    push.state()

    response = owner_client.post(
        reverse("console:push-sender"), {"contact": "mailto:me@example.org"}
    )

    assert response.status_code == 302
    assert response["Location"].endswith("/settings/#push-sender")
    assert PushState.objects.get().contact == "mailto:me@example.org"
    assert push._contact() == "mailto:me@example.org"
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.PUSH_SENDER_CHANGED).count() == 1
    page = text_of(owner_client.get("/settings/"))
    assert '<dd id="push-sender-contact">mailto:me@example.org</dd>' in page


@pytest.mark.parametrize(
    "contact", ["me@example.org", "mailto:not an address", "http://example.org", "x" * 300]
)
def test_it_refuses_a_contact_push_services_would_not_take(
    owner_client: Client, contact: str
) -> None:
    before = push.state().contact

    response = owner_client.post(reverse("console:push-sender"), {"contact": contact})

    assert response.status_code == 400
    page = text_of(response)
    assert re.search(r'<input[^>]*name="contact"[^>]*autofocus', page)
    assert PushState.objects.get().contact == before
    assert push_sender.sender().from_settings


def test_a_new_token_has_a_copy_button_and_each_token_its_labelled_cells(
    owner_client: Client,
) -> None:
    response = owner_client.post("/settings/", {"name": "ci", "scopes": ["read"], "days": "30"})

    page = text_of(response)
    assert 'data-copy="new-token"' in page
    assert re.search(r'<table class="table table-stack" id="tokens">', page)
    assert re.search(r'data-label="Actions">\s*<form method="post" action="/settings/tokens/', page)


# --- Names as the owner knows them ---------------------------------------------------------


def test_memory_scopes_are_named_by_their_project(owner_client: Client) -> None:
    shop = Project.objects.create(name="Shop front")
    store.write(
        f"project/{shop.pk}",
        [Draft("CI runs on Jenkins", "The job ci-main builds every branch.")],
        author="run:1",
        message="facts",
    )

    page = text_of(owner_client.get("/memory/"))

    assert "Project “Shop front”</a>" in page
    assert "Global memory</a>" in page
    # The search's scope picker too.
    assert re.search(rf'<option value="project/{shop.pk}">Project “Shop front”</option>', page)
    scope = text_of(owner_client.get(f"/memory/project/{shop.pk}/"))
    assert '<h1 class="page-title">Project “Shop front”</h1>' in scope


def test_the_rule_picker_offers_no_internal_tool(owner_client: Client) -> None:
    page = text_of(owner_client.get("/tools/"))

    picker = page[page.index('name="tool"') : page.index("</select>", page.index('name="tool"'))]
    assert 'value="shell"' in picker
    assert 'value="noop"' not in picker
    assert 'value="load_tool_schema"' not in picker


# --- The admin of a single owner ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["auth_user", "auth_group", "kernel_chaoseffect"])
def test_the_admin_leaves_out_users_groups_and_chaos_records(
    owner_client: Client, name: str
) -> None:
    with pytest.raises(NoReverseMatch):
        reverse(f"admin:{name}_changelist")
    index = text_of(owner_client.get("/admin/"))
    assert "Chaos effects" not in index
    assert ">Users<" not in index
    assert ">Groups<" not in index
    assert "Global budgets" in index or "Global budget" in index  # still the policy editor


# --- A project's push credential, on its page ---------------------------------------------------

SECRET = "ghp_rough_edges_secret_7f3a"  # a test's made-up token


def test_it_sets_a_projects_push_credential_on_its_page_write_only(
    owner_client: Client, tmp_path: Path
) -> None:
    shop = Project.objects.create(name="Shop front", repository=str(tmp_path))
    page = text_of(owner_client.get(f"/projects/{shop.pk}/"))
    assert "admin/tools/remotecredential" not in page
    assert f'action="/projects/{shop.pk}/credential/"' in page

    response = owner_client.post(
        f"/projects/{shop.pk}/credential/",
        {"remote": "origin", "kind": "token", "username": "", "secret": SECRET},
    )

    assert response.status_code == 302
    assert response["Location"].endswith(f"/projects/{shop.pk}/#push-credentials")
    stored = RemoteCredential.objects.get(project=shop, remote="origin")
    assert SECRET.encode() not in bytes(stored.ciphertext)
    assert remotes.values() == [SECRET]
    assert stored.username == remotes.TOKEN_USER
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.REMOTE_CREDENTIAL_CHANGED)
    assert SECRET not in str(event.detail)
    again = text_of(owner_client.get(f"/projects/{shop.pk}/"))
    assert SECRET not in again
    assert "never shown again" in again


def test_a_refused_push_credential_keeps_nothing_and_never_shows_the_secret(
    owner_client: Client, tmp_path: Path
) -> None:
    shop = Project.objects.create(name="Shop front", repository=str(tmp_path))

    response = owner_client.post(
        f"/projects/{shop.pk}/credential/",
        {"remote": "origin", "kind": "password", "username": "", "secret": SECRET},
    )

    assert response.status_code == 400
    page = text_of(response)
    assert SECRET not in page
    assert re.search(r'<select[^>]*name="kind"[^>]*autofocus', page)
    assert re.search(r"<details class=\"push-credential\" open>", page)
    assert not RemoteCredential.objects.exists()
