"""Notes round-trip through git; they are invalidated, never rewritten; the index answers as of a
date; no secret reaches a note; a retried write adds nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory import notes, repository, store
from memory.models import Note, Scope
from memory.notes import NoteError
from memory.store import Draft
from missions import keys

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)
MAR = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def file_at_tip(scope: str, path: str) -> str:
    blobs = repository.files(scope, repository.head(scope))
    ((_blob, content),) = repository.read(scope, [blobs[path]])
    return content.decode()


def test_notes_round_trip_through_the_scope_s_repository() -> None:
    paths = store.write(
        "project/7",
        [
            Draft("Deploys use blue-green", "Switch traffic with the LB flag.", valid_from=JAN,
                  source_events=(12, 5), verified_by="owner", confidence=0.9),
            Draft("The staging DB is Postgres 16", "Upgraded in December.", type="event",
                  valid_from=MAR),
        ],
        author="run:42",
        message="What run 42 learned",
    )  # fmt: skip

    assert paths[0].startswith("notes/2026-01/20260110-deploys-use-blue-green-")
    assert paths[1].startswith("notes/2026-03/")
    read = notes.parse(file_at_tip("project/7", paths[0]), path=paths[0])
    assert (read.title, read.body, read.type, read.author) == (
        "Deploys use blue-green",
        "Switch traffic with the LB flag.",
        "fact",
        "run:42",
    )
    assert (read.valid_from, read.invalid_at, read.verified, read.confidence) == (
        JAN,
        None,
        True,
        0.9,
    )
    assert read.source_events == (5, 12)
    index = file_at_tip("project/7", notes.INDEX_FILE)
    assert index.splitlines()[1].startswith(
        "- [Deploys use blue-green](notes/2026-01/"
    )  # verified first
    assert "(unverified)" in index.splitlines()[2]
    ((commit, _date, subject),) = repository.log("project/7")
    assert subject == "What run 42 learned"
    assert commit == Scope.objects.get(name="project/7").head
    indexed = Note.objects.get(path=paths[0])
    assert indexed.blob == repository.files("project/7", commit)[paths[0]]


def test_a_retried_write_adds_nothing() -> None:
    draft = Draft("Backups run at 02:00", "Nightly, kept 30 days.", valid_from=JAN)

    first = store.write("global", [draft], author="owner", message="one")
    again = store.write("global", [draft, draft], author="owner", message="again")

    assert again == first * 2
    assert len(repository.log("global")) == 1
    assert Note.objects.count() == 1


def test_it_tells_whether_a_draft_is_already_there() -> None:
    draft = Draft("CI runs on Jenkins", "The job ci-main builds every branch.", valid_from=JAN)
    assert not store.holds("project/7", draft, author="run:1")

    store.write("project/7", [draft], author="run:1", message="facts")

    assert store.holds("project/7", draft, author="run:1")
    assert not store.holds("project/8", draft, author="run:1")
    later = Draft(draft.title, draft.body, valid_from=datetime(2026, 2, 1, tzinfo=UTC))
    assert not store.holds("project/7", later, author="run:1")
    with pytest.raises(NoteError, match="with its time"):
        store.holds("project/7", Draft(draft.title, draft.body), author="run:1")


def test_a_note_is_invalidated_never_rewritten_and_the_index_answers_as_of_a_date() -> None:
    (path,) = store.write(
        "project/7", [Draft("CI runs on Jenkins", "Job ci-main.", valid_from=JAN)],
        author="run:1", message="ci",
    )  # fmt: skip
    before = file_at_tip("project/7", path)

    ended = store.invalidate(
        "project/7", path, at=MAR, author="run:2", reason="moved to GitHub Actions",
        source_events=(99,),
    )  # fmt: skip

    after = file_at_tip("project/7", path)
    assert ended.invalid_at == MAR
    assert after.split("---\n", 2)[2] == before.split("---\n", 2)[2]  # the text is kept
    assert 'invalid_at: "2026-03-02T09:00:00+00:00"' in after
    assert "invalid_at: null" in before
    log = repository.log("project/7")
    assert log[0][2] == f"Invalidate {path}: moved to GitHub Actions"
    row = Note.objects.get(path=path)
    assert row.invalid_at == MAR
    assert row.valid_from == JAN
    assert "CI runs on Jenkins" not in file_at_tip("project/7", notes.INDEX_FILE)
    with pytest.raises(NoteError, match="already invalid"):
        store.invalidate("project/7", path, author="run:3", reason="again")
    with pytest.raises(NoteError, match="No note"):
        store.invalidate("project/7", "notes/2026-01/none.md", author="run:3", reason="x")


def test_no_secret_reaches_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    keys.put("anthropic", "plain-stored-provider-key-0042")
    planted = (
        "Tool output: export OPENAI_API_KEY=sk-proj-Abcdefghijklmnopqrstuvwx0123 and "
        "token ghp_0123456789abcdefghijABCDEFGHIJ012345, the provider key "
        "plain-stored-provider-key-0042, and https://deploy:hunter2pass@git.example.com/x.git"
    )

    (path,) = store.write(
        "project/7", [Draft("Deploy credentials", planted, valid_from=JAN)],
        author="run:9", message=f"Learned {planted}",
    )  # fmt: skip

    kept = file_at_tip("project/7", path) + Note.objects.get(path=path).body
    kept += "\n".join(subject for _sha, _date, subject in repository.log("project/7"))
    for secret in ("sk-proj-Abcdef", "ghp_0123", "plain-stored-provider-key", "hunter2pass"):
        assert secret not in kept
    assert kept.count("[secret]") >= 8


@pytest.mark.parametrize(
    ("draft", "message"),
    [
        (Draft("", "body"), "title is 1 to"),
        (Draft("t", "b", type="rumour"), "Unknown note type"),
        (Draft("t", "b", confidence=2.0), "between 0 and 1"),
        (Draft("t", "b", valid_from=datetime(2026, 1, 1)), "time zone"),  # noqa: DTZ001
        (Draft("t", "x" * 20_001), "at most 20,000"),
    ],
)
def test_a_bad_note_is_refused_and_nothing_is_written(draft: Draft, message: str) -> None:
    with pytest.raises(NoteError, match=message):
        store.write("global", [draft], author="owner", message="bad")

    assert repository.head("global") == ""
    assert not Note.objects.exists()


@pytest.mark.parametrize("scope", ["", "Global", "../etc", "project/7/../../x", "a/b/c/d/e"])
def test_a_bad_scope_is_refused(scope: str) -> None:
    with pytest.raises(NoteError, match="is not a memory scope"):
        store.write(scope, [Draft("t", "b")], author="owner", message="bad")
