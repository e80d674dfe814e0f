"""/api/v1/memory: scopes, a scope's notes by pages and its history, one note with where its
events happened, search, and the owner's notes and invalidations — each refusal with its status,
code and message."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from agentos.core import tokens
from agentos.core.models import AuditEvent
from kernel import journal
from memory import store
from memory.models import Note
from memory.store import Draft
from tests.api.conftest import Api
from tests.approvals.factories import make_approval
from tests.factories import Owner

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)


@pytest.fixture
def api(client: Client, owner: Owner) -> Api:
    return Api(client, tokens.create_token(owner=owner.user, name="tests").secret)


def error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content[:500]
    found: dict[str, Any] = json.loads(response.content)["error"]
    return found


def seed() -> list[str]:
    return store.write(
        "project/7",
        [Draft(f"Fact {n}", f"Body {n} about Jenkins.", valid_from=datetime(2026, 1, n + 1,
               tzinfo=UTC)) for n in range(5)],
        author="run:1",
        message="five facts",
    )  # fmt: skip


def test_it_lists_scopes_with_their_counts(api: Api) -> None:
    paths = seed()
    store.invalidate("project/7", paths[0], author="run:1", reason="wrong")

    response = api.get("/memory/scopes")

    assert response.status_code == 200
    scopes = {scope["name"]: scope for scope in response.json()}
    assert set(scopes) == {"global", "skills", "project/7"}
    assert (scopes["project/7"]["valid"], scopes["project/7"]["invalidated"]) == (4, 1)
    assert scopes["project/7"]["shared"] is False
    assert scopes["global"]["shared"] is True
    assert len(scopes["project/7"]["head"]) == 40
    assert scopes["project/7"]["changed_at"]
    assert scopes["global"]["head"] == ""
    assert scopes["global"]["changed_at"] is None


def test_it_pages_a_scope_s_notes_newest_first_without_bodies(api: Api) -> None:
    paths = seed()
    store.invalidate("project/7", paths[0], author="run:1", reason="wrong")

    page = api.get("/memory/scopes/project/7/notes", {"limit": 2, "offset": 1}).json()

    assert (page["scope"], page["total"], page["limit"], page["offset"]) == ("project/7", 4, 2, 1)
    assert [item["title"] for item in page["items"]] == ["Fact 3", "Fact 2"]
    assert "body" not in page["items"][0]
    assert page["items"][0]["verified"] is False
    assert page["items"][0]["author"] == "run:1"
    ended = api.get("/memory/scopes/project/7/notes", {"valid": "false"}).json()
    assert [(item["path"], item["invalid_at"] is not None) for item in ended["items"]] == [
        (paths[0], True)
    ]


def test_one_note_with_its_body_and_where_its_events_happened(api: Api) -> None:
    run = make_approval().run
    event = journal.append_event("test.memory", run_id=run.pk, seq=2)
    (path,) = store.write(
        "global",
        [Draft("Deploy", "<script>x</script>", valid_from=JAN, source_events=(event.pk, 77))],
        author="run:3",
        message="fact",
    )

    note = api.get("/memory/notes", {"scope": "global", "path": path}).json()

    assert note["body"] == "<script>x</script>"
    assert note["path"] == path
    assert note["valid_from"] == "2026-01-10T09:00:00Z"
    assert note["invalid_at"] is None
    assert sorted(note["events"], key=lambda e: e["id"] != 77) == [
        {"id": 77, "run_id": None, "seq": None},
        {"id": event.pk, "run_id": run.pk, "seq": 2},
    ]


def test_it_searches_one_scope_or_all_as_of_a_moment(api: Api) -> None:
    seed()
    store.write("global", [Draft("Jenkins backups", "Nightly.", valid_from=JAN)],
                author="owner", message="x")  # fmt: skip

    everywhere = api.get("/memory/search", {"q": "Jenkins", "k": 10}).json()
    global_only = api.get("/memory/search", {"q": "Jenkins", "scope": "global"}).json()
    before = api.get("/memory/search", {"q": "Jenkins", "as_of": "2025-12-01T00:00:00Z"}).json()

    assert {hit["scope"] for hit in everywhere} == {"global", "project/7"}
    assert [hit["title"] for hit in global_only] == ["Jenkins backups"]
    assert global_only[0]["source_events"] == []
    assert global_only[0]["verified"] is False
    assert before == []


def test_the_owner_adds_a_verified_note(api: Api) -> None:
    response = api.post(
        "/memory/notes",
        {"scope": "global", "title": "Prefer  small PRs", "body": "Under 400 lines.",
         "type": "preference", "valid_from": "2026-02-01T10:00:00+01:00"},
    )  # fmt: skip

    assert response.status_code == 201, response.content
    note = response.json()
    assert (note["title"], note["verified"], note["author"], note["type"]) == (
        "Prefer small PRs",
        True,
        "owner",
        "preference",
    )
    assert note["valid_from"] == "2026-02-01T09:00:00Z"
    assert Note.objects.get(path=note["path"]).scope.name == "global"
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.MEMORY_CHANGED)
    assert event.detail == {
        "scope": "global",
        "path": note["path"],
        "change": "added",
        "by": "token:tests",
    }


def test_the_owner_invalidates_a_note_once(api: Api) -> None:
    (path, *_rest) = seed()

    response = api.post(
        "/memory/notes/invalidate", {"scope": "project/7", "path": path, "reason": "Moved."}
    )

    assert response.status_code == 200, response.content
    assert response.json()["invalid_at"] is not None
    again = api.post(
        "/memory/notes/invalidate", {"scope": "project/7", "path": path, "reason": "Moved."}
    )
    assert error(again, 409)["code"] == "conflict"
    assert error(again, 409)["message"].startswith(f"{path} is already invalid since 20")
    history = api.get("/memory/scopes/project/7/history", {"limit": 1}).json()
    assert [commit["subject"] for commit in history] == [f"Invalidate {path}: Moved."]


@pytest.mark.parametrize(
    ("call", "status", "code", "message"),
    [
        (
            ("get", "/memory/scopes/project/99/notes", None),
            404,
            "not_found",
            "No memory scope 'project/99'.",
        ),
        (
            ("get", "/memory/scopes/Bad/history", None),
            400,
            "invalid_input",
            "'Bad' is not a memory scope: one to four '/'-separated parts of a-z, 0-9, _ and -"
            " (global, project/12, agent/executor, skills).",
        ),
        (
            ("get", "/memory/notes", {"scope": "project/7", "path": "../../etc/passwd"}),
            400,
            "invalid_input",
            "'../../etc/passwd' is not a note's path: notes/YYYY-MM/<name>.md, as listed.",
        ),
        (
            ("get", "/memory/notes", {"scope": "project/7", "path": "notes/2026-01/none.md"}),
            404,
            "not_found",
            "No note notes/2026-01/none.md in project/7.",
        ),
        (
            ("get", "/memory/search", {"q": " ", "scope": "project/7"}),
            400,
            "invalid_input",
            "Say what to search for.",
        ),
        (
            ("get", "/memory/search", {"q": "x", "scope": "agent/nobody"}),
            404,
            "not_found",
            "No memory scope 'agent/nobody'.",
        ),
        (
            ("post", "/memory/notes", {"scope": "project/99", "title": "x"}),
            404,
            "not_found",
            "No memory scope 'project/99'.",
        ),
        (
            ("post", "/memory/notes", {"scope": "global", "title": "   "}),
            400,
            "invalid_input",
            "A note's title is 1 to 200 characters.",
        ),
        (
            (
                "post",
                "/memory/notes/invalidate",
                {"scope": "project/7", "path": "notes/2026-01/none.md", "reason": "x"},
            ),
            404,
            "not_found",
            "No note notes/2026-01/none.md in project/7.",
        ),
        (
            ("post", "/memory/notes/invalidate", {"scope": "project/7", "path": "", "reason": " "}),
            400,
            "invalid_input",
            "'' is not a note's path: notes/YYYY-MM/<name>.md, as listed.",
        ),
    ],
)
def test_bad_input_is_refused_with_a_precise_message(
    api: Api, call: tuple[str, str, Any], status: int, code: str, message: str
) -> None:
    seed()
    method, path, data = call

    response = api.get(path, data) if method == "get" else api.post(path, data)

    found = error(response, status)
    assert (found["code"], found["message"]) == (code, message)
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.MEMORY_CHANGED).exists()


def test_a_blank_reason_is_refused_and_the_note_kept(api: Api) -> None:
    (path, *_rest) = seed()

    blank = api.post("/memory/notes/invalidate", {"scope": "project/7", "path": path,
                                                  "reason": "  "})  # fmt: skip
    missing = api.post("/memory/notes/invalidate", {"scope": "project/7", "path": path})

    assert error(blank, 400)["message"] == "Say why this note no longer holds."
    assert error(missing, 422)["details"][0]["loc"] == ["body", "reason"]
    assert Note.objects.get(path=path).invalid_at is None


def test_an_unknown_type_or_field_is_refused_by_the_schema(api: Api) -> None:
    unknown_type = api.post("/memory/notes", {"scope": "global", "title": "x", "type": "rumour"})
    extra = api.post("/memory/notes", {"scope": "global", "title": "x", "verified": False})
    naive = api.post(
        "/memory/notes", {"scope": "global", "title": "x", "valid_from": "2026-01-01T00:00:00"}
    )

    assert error(unknown_type, 422)["details"][0]["loc"] == ["body", "type"]
    assert (
        "'fact', 'lesson', 'decision', 'preference', 'procedure' or 'event'"
        in (error(unknown_type, 422)["details"][0]["msg"])
    )
    assert error(extra, 422)["details"][0]["type"] == "extra_forbidden"
    assert error(naive, 422)["details"][0]["type"] == "timezone_aware"
    assert not Note.objects.exists()


def test_the_page_size_is_capped(api: Api) -> None:
    too_many = api.get("/memory/scopes/global/notes", {"limit": 201})

    assert error(too_many, 422)["details"][0]["loc"] == ["query", "limit"]


def test_a_read_only_token_cannot_write_memory(client: Client, owner: Owner) -> None:
    reader = Api(client, tokens.create_token(owner=owner.user, name="r", scopes=["read"]).secret)

    response = reader.post("/memory/notes", {"scope": "global", "title": "x"})

    assert error(response, 403)["code"] == "insufficient_scope"
    assert reader.get("/memory/scopes").status_code == 200


def test_the_owner_verifies_an_agent_s_note_once_through_a_token(api: Api) -> None:
    (path, *_rest) = seed()

    response = api.post("/memory/notes/verify", {"scope": "project/7", "path": path})

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["verified"], body["verified_by"], body["author"]) == (True, "token:tests", "run:1")
    assert body["verified_at"] is not None
    again = api.post("/memory/notes/verify", {"scope": "project/7", "path": path})
    assert error(again, 409)["message"] == f"{path} is already verified (token:tests)."
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.MEMORY_CHANGED)
    assert event.detail == {
        "scope": "project/7",
        "path": path,
        "change": "verified",
        "by": "token:tests",
    }
    history = api.get("/memory/scopes/project/7/history", {"limit": 1}).json()
    assert [commit["subject"] for commit in history] == [f"Verify {path}"]
    assert 'verified_by: "token:tests"' in store.read_file("project/7", path)


def test_an_invalidated_or_unknown_note_is_not_verified(api: Api) -> None:
    (path, *_rest) = seed()
    store.invalidate("project/7", path, author="run:1", reason="wrong")

    refused = api.post("/memory/notes/verify", {"scope": "project/7", "path": path})

    assert error(refused, 409)["message"] == (
        f"{path} no longer holds: only a note that holds is verified."
    )
    missing = api.post(
        "/memory/notes/verify", {"scope": "project/7", "path": "notes/2026-01/nothing.md"}
    )
    assert error(missing, 404)["code"] == "not_found"
    extra = api.post(
        "/memory/notes/verify", {"scope": "project/7", "path": path, "verified_by": "run:1"}
    )
    assert extra.status_code == 422
    assert not Note.objects.filter(verified=True).exists()
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.MEMORY_CHANGED).exists()
