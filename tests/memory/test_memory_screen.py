"""The Memory screen: scopes with their counts, search, the proposals waiting for the owner; a
scope's notes by pages (never all of them), its history, the owner's own notes; a note with its
provenance, escaped, and its invalidation with a reason, in the security log."""

from __future__ import annotations

import html
from datetime import UTC, datetime

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agentos.core.models import AuditEvent
from kernel import journal
from memory import store
from memory.models import Note
from memory.store import Draft
from memory.views import NOTES_SHOWN
from tests.approvals.factories import make_approval

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)


def note_url(scope: str, path: str) -> str:
    return reverse("console:memory-note", kwargs={"scope": scope, "path": path})


def scope_url(scope: str) -> str:
    return reverse("console:memory-scope", kwargs={"scope": scope})


def text(response: object) -> str:
    return html.unescape(response.content.decode())  # type: ignore[attr-defined]


def test_it_lists_scopes_with_their_valid_notes_and_last_change(owner_client: Client) -> None:
    paths = store.write(
        "project/7",
        [Draft("CI runs on Jenkins", "ci-main", valid_from=JAN), Draft("Old", "x", valid_from=JAN)],
        author="run:1",
        message="facts",
    )
    store.invalidate("project/7", paths[1], author="run:1", reason="wrong")

    response = owner_client.get(reverse("console:memory"))

    assert response.status_code == 200
    page = text(response)
    assert scope_url("project/7") in page
    assert "1 valid note · 1 invalidated" in page
    assert "last change " in page
    # The shared scopes are there before anything is written to them.
    assert scope_url("global") in page
    assert scope_url("skills") in page
    assert "nothing written yet" in page


def test_the_memory_screen_is_built_and_in_the_navigation(owner_client: Client) -> None:
    response = owner_client.get(reverse("console:more"))

    assert reverse("console:memory") == "/memory/"
    assert 'href="/memory/"' in response.content.decode()


def test_it_searches_with_path_scope_validity_and_verification(owner_client: Client) -> None:
    mission_run = make_approval().run
    event = journal.append_event("test.memory", run_id=mission_run.pk, seq=3)
    store.write(
        "project/7",
        [Draft("CI runs on Jenkins", "The job ci-main builds every branch.", valid_from=JAN,
               source_events=(event.pk, 999_999_999))],
        author="run:1",
        message="facts",
    )  # fmt: skip
    store.write(
        "global",
        [Draft("Jenkins is slow on Mondays", "Backups run.", valid_from=JAN, verified_by="owner")],
        author="owner",
        message="facts",
    )

    response = owner_client.get(reverse("console:memory"), {"q": "Jenkins job"})

    assert response.status_code == 200
    page = text(response)
    assert "2 notes found" in page
    # Scopes by name: project 7 is not in the database here.
    assert "Project 7 (deleted) · <code>notes/2026-01/20260110-ci-runs-on-jenkins-" in page
    assert "holds from 2026-01-10 09:00" in page
    assert ">unverified<" in page
    assert ">verified<" in page
    # A cited event is linked to its run's step; one the journal no longer holds is its id.
    assert f'<a href="/runs/{mission_run.pk}/#step-3">{event.pk}</a>' in page
    assert ", 999999999<" in page

    one_scope = owner_client.get(reverse("console:memory"), {"q": "Jenkins", "scope": "global"})
    assert "1 note found" in text(one_scope)

    before = owner_client.get(reverse("console:memory"), {"q": "Jenkins", "as_of": "2025-12-31"})
    assert "0 notes found" in text(before)


def test_a_search_in_an_unknown_scope_is_refused_by_the_form(owner_client: Client) -> None:
    response = owner_client.get(reverse("console:memory"), {"q": "x", "scope": "project/99"})

    assert response.status_code == 400
    assert "Select a valid choice. project/99 is not one of the available choices." in text(
        response
    )


def test_pending_proposals_link_to_their_approval_with_the_diff(owner_client: Client) -> None:
    diff = 'diff --git a/notes/x.md b/notes/x.md\n+title: "Deploy on Fridays"\n'
    approval = make_approval(
        tool="memory_propose",
        arguments={"scope": "global", "title": "Deploy on Fridays", "body": "<b>no</b>"},
        preview={"diff": diff, "branch": "refs/heads/proposals/x", "valid_from": JAN.isoformat()},
    )
    make_approval()  # another tool's approval: not a proposal

    response = owner_client.get(reverse("console:memory"))

    page = response.content.decode()
    approval_url = reverse("console:approval", args=[approval.pk])
    assert f'href="{approval_url}">Deploy on Fridays</a>' in page
    assert '<span class="diff-add">+title: &quot;Deploy on Fridays&quot;</span>' in page
    assert page.count("Approve or refuse on its page") == 1


def test_a_scope_shows_the_newest_notes_and_how_many_in_all(owner_client: Client) -> None:
    drafts = [
        Draft(f"Fact {n:03}", "x", valid_from=datetime(2026, 1, 1, 0, n, tzinfo=UTC))
        for n in range(NOTES_SHOWN + 5)
    ]
    store.write("project/7", drafts, author="run:1", message="many")

    response = owner_client.get(scope_url("project/7"))

    assert response.status_code == 200
    page = text(response)
    assert page.count('class="list-item-title" href="/memory/project/7/notes/') == NOTES_SHOWN
    assert f"Notes 1 to {NOTES_SHOWN} of {NOTES_SHOWN + 5}, newest first." in page
    assert f"Fact {NOTES_SHOWN + 4:03}" in page
    assert "Fact 004" not in page
    older = text(owner_client.get(scope_url("project/7"), {"current": NOTES_SHOWN}))
    assert f"Notes {NOTES_SHOWN + 1} to {NOTES_SHOWN + 5} of {NOTES_SHOWN + 5}" in older
    assert "Fact 004" in older
    assert "Fact 005" not in older


def test_a_scope_page_lists_invalidated_notes_and_its_history(owner_client: Client) -> None:
    (kept, ended) = store.write(
        "project/7",
        [Draft("Kept", "x", valid_from=JAN), Draft("Ended", "y", valid_from=JAN)],
        author="run:1",
        message="two facts",
    )
    store.invalidate("project/7", ended, author="run:1", reason="no longer true")

    page = text(owner_client.get(scope_url("project/7")))

    holding, invalidated = page.split("Invalidated notes</h2>")
    assert note_url("project/7", kept) in holding
    assert note_url("project/7", ended) in invalidated
    assert "invalid from " in invalidated
    assert f"Invalidate {ended}: no longer true" in page  # the history's newest commit
    assert "two facts" in page


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/memory/project/99/", "No memory scope 'project/99'."),
        (
            "/memory/Project!/",
            "'Project!' is not a memory scope: one to four '/'-separated parts of a-z, 0-9, _"
            " and - (global, project/12, agent/executor, skills).",
        ),
        ("/memory/global/notes/2026-01/x.md", "No note notes/2026-01/x.md in global."),
        (
            "/memory/global/notes/2026/<x>.md",
            "'notes/2026/<x>.md' is not a note's path: notes/YYYY-MM/<name>.md, as listed.",
        ),
    ],
)
def test_an_unknown_or_malformed_scope_or_note_is_not_found(
    owner_client: Client, url: str, message: str
) -> None:
    response = owner_client.get(url)

    assert response.status_code == 404
    assert message in text(response)


def test_a_note_shows_its_header_and_provenance_its_body_as_text(owner_client: Client) -> None:
    (path,) = store.write(
        "project/7",
        [Draft("Careful", "<script>alert('x')</script>\n<b>bold</b>", valid_from=JAN,
               source_events=(41,), confidence=0.7)],
        author="run:12",
        message="fact",
    )  # fmt: skip

    response = owner_client.get(note_url("project/7", path))

    assert response.status_code == 200
    page = response.content.decode()
    assert "<script>alert" not in page
    assert "<b>bold" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;\n&lt;b&gt;bold&lt;/b&gt;" in page
    assert '<span class="status status-unknown" id="note-verified">unverified</span>' in page
    assert '<dd id="note-author">run:12</dd>' in page
    assert '<dd id="note-events">41</dd>' in page  # no such event: its id alone
    assert "2026-01-10 09:00:00 UTC" in page
    assert "0.70" in page
    assert "Invalidate the note" in page


def test_a_note_that_hides_characters_shows_them_before_the_owner_verifies_it(
    owner_client: Client,
) -> None:
    # A right-to-left override reverses what follows it on screen: "Never deploy on Fridays"
    # could read as something else. The owner must see the characters before verifying.
    title = "Deploy \u202eyadirF no\u202c always"
    (path,) = store.write("project/7", [Draft(title, "ok\u200b go", valid_from=JAN)],
                          author="run:1", message="fact")  # fmt: skip

    listed = owner_client.get(scope_url("project/7")).content.decode()
    page = owner_client.get(note_url("project/7", path)).content.decode()

    for shown in (listed, page):
        assert "\u202e" not in shown
        assert '<span class="hidden-char" title="U+202E">&lt;U+202E&gt;</span>' in shown
    assert "\u200b" not in page
    assert page.count('class="hidden-flag"') == 2  # the title and the text


def test_the_owner_invalidates_a_note_with_a_reason(owner_client: Client) -> None:
    (path,) = store.write("global", [Draft("Deploys on Fridays", "y", valid_from=JAN)],
                          author="run:1", message="fact")  # fmt: skip

    refused = owner_client.post(note_url("global", path), {"reason": "  "})
    assert refused.status_code == 400
    assert "This field is required." in text(refused)
    assert Note.objects.get(path=path).invalid_at is None

    response = owner_client.post(note_url("global", path), {"reason": "We stopped that."})

    assert response.status_code == 302
    assert response["Location"] == note_url("global", path)
    note = Note.objects.get(path=path)
    assert note.invalid_at is not None
    assert note.invalid_at <= timezone.now()
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.MEMORY_CHANGED)
    assert event.detail == {
        "scope": "global",
        "path": path,
        "change": "invalidated",
        "by": "owner",
    }
    page = text(owner_client.get(note_url("global", path)))
    assert "invalidated" in page
    assert "Invalidate the note" not in page


def test_the_owner_adds_a_verified_note_to_a_scope(owner_client: Client) -> None:
    store.write("project/7", [Draft("Seed", "x", valid_from=JAN)], author="run:1", message="seed")

    response = owner_client.post(
        scope_url("project/7"),
        {"title": "The staging host is db-2", "body": "Since March.", "type": "fact",
         "valid_from": "2026-03-01T08:30"},
    )  # fmt: skip

    assert response.status_code == 302
    note = Note.objects.get(title="The staging host is db-2")
    assert response["Location"] == note_url("project/7", note.path)
    assert (note.verified, note.author, note.scope.name) == (True, "owner", "project/7")
    assert note.valid_from == datetime(2026, 3, 1, 8, 30, tzinfo=UTC)
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.MEMORY_CHANGED)
    assert event.detail["change"] == "added"
    assert event.detail["path"] == note.path
    page = text(owner_client.get(note_url("project/7", note.path)))
    assert '<span class="status status-approved" id="note-verified">verified</span>' in page


def test_an_unknown_type_or_a_missing_title_is_refused_by_the_form(owner_client: Client) -> None:
    response = owner_client.post(scope_url("global"), {"title": "", "type": "rumour"})

    assert response.status_code == 400
    page = text(response)
    assert "Select a valid choice. rumour is not one of the available choices." in page
    assert "This field is required." in page
    assert not Note.objects.exists()


def test_the_owner_verifies_an_agent_s_note_with_a_button(owner_client: Client) -> None:
    (path,) = store.write("project/7", [Draft("Deploys on Fridays", "y", valid_from=JAN)],
                          author="run:12", message="fact")  # fmt: skip
    page = text(owner_client.get(note_url("project/7", path)))
    assert '<dd id="note-verified-by">nobody yet</dd>' in page
    verify = reverse("console:memory-note-verify", kwargs={"scope": "project/7", "path": path})
    assert f'action="{verify}"' in page

    assert owner_client.get(verify).status_code == 405  # a change is a POST
    response = owner_client.post(verify)

    assert response.status_code == 302
    assert response["Location"] == note_url("project/7", path)
    note = Note.objects.get(path=path)
    assert (note.verified, note.verified_by, note.author) == (True, "owner", "run:12")
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.MEMORY_CHANGED)
    assert event.detail == {"scope": "project/7", "path": path, "change": "verified", "by": "owner"}
    page = text(owner_client.get(note_url("project/7", path)))
    assert '<dd id="note-verified-by">owner, ' in page
    assert "Verify this note" not in page
    again = owner_client.post(verify)
    assert again.status_code == 409
    assert f"{path} is already verified (owner)." in text(again)
