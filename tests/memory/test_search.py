"""`memory_search`: full text and vectors fused, restricted to the scopes and the moment asked."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from memory import embeddings, search, store
from memory.models import Note
from memory.notes import NoteError
from memory.store import Draft

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)
MAR = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def project() -> dict[str, str]:
    drafts = {
        "ci": Draft("CI runs on Jenkins", "The job ci-main builds every branch.", valid_from=JAN,
                    source_events=(41, 7)),
        "db": Draft("Staging database", "Staging runs PostgreSQL 16 on db-stage-2.",
                    valid_from=JAN),
        "pet": Draft("Owner's dog", "The owner adopted a beagle puppy called Biscuit.",
                     valid_from=JAN),
        "deploy": Draft("Release procedure", "Tag, wait for green checks, then promote to prod.",
                        type="procedure", valid_from=JAN, verified_by="owner"),
    }  # fmt: skip
    paths = store.write("project/7", list(drafts.values()), author="run:1", message="facts")
    store.write("project/8", [Draft("CI runs on Jenkins", "Other project.", valid_from=JAN)],
                author="run:2", message="other")  # fmt: skip
    embeddings.embed_pending()
    return dict(zip(drafts, paths, strict=True))


def test_it_finds_by_words_within_the_scopes_asked(project: dict[str, str]) -> None:
    hits = search.search("Jenkins job", scopes=["project/7"])

    assert hits[0].path == project["ci"]
    assert hits[0].scope == "project/7"
    assert "ci-main" in hits[0].snippet
    assert hits[0].source_events == (7, 41)
    assert {hit.scope for hit in hits} == {"project/7"}
    both = search.search("Jenkins", scopes=["project/7", "project/8"])
    assert {hit.scope for hit in both[:2]} == {"project/7", "project/8"}


def test_it_finds_by_meaning_what_no_word_matches(project: dict[str, str]) -> None:
    hits = search.search("does the owner have a pet animal?", scopes=["project/7"], k=3)

    assert hits[0].path == project["pet"]


def test_every_note_gets_a_vector_and_the_cache_makes_a_rewrite_free(
    project: dict[str, str],
) -> None:
    assert not Note.objects.filter(embedding__isnull=True).exists()
    store.write("project/9", [Draft("CI runs on Jenkins", "Other project.", valid_from=JAN)],
                author="run:3", message="same text")  # fmt: skip

    assert embeddings.fill_from_cache() == 1  # the same text: no model call


def test_it_answers_as_of_a_date(project: dict[str, str]) -> None:
    store.invalidate("project/7", project["ci"], at=MAR, author="run:2", reason="moved")
    (actions,) = store.write(
        "project/7", [Draft("CI runs on GitHub Actions", "Since March.", valid_from=MAR)],
        author="run:2", message="moved",
    )  # fmt: skip
    embeddings.embed_pending()

    now = [hit.path for hit in search.search("CI runs on", scopes=["project/7"])]
    in_february = [
        hit.path
        for hit in search.search("CI runs on", scopes=["project/7"], as_of=MAR - timedelta(days=20))
    ]

    assert actions in now
    assert project["ci"] not in now
    assert project["ci"] in in_february
    assert actions not in in_february
    (old,) = [h for h in search.search("Jenkins", scopes=["project/7"], as_of=JAN + timedelta(1))
              if h.path == project["ci"]]  # fmt: skip
    assert old.invalid_at == MAR


def test_a_note_not_valid_yet_is_not_found_before_its_time(project: dict[str, str]) -> None:
    soon = datetime.now(UTC) + timedelta(days=3)
    (freeze,) = store.write("project/7", [Draft("Code freeze", "Freeze before the audit.",
                                                 valid_from=soon)],
                            author="owner", message="freeze")  # fmt: skip
    embeddings.embed_pending()

    assert freeze not in [h.path for h in search.search("code freeze", scopes=["project/7"])]
    later = search.search("code freeze", scopes=["project/7"], as_of=soon + timedelta(hours=1))
    assert later[0].path == freeze


@pytest.mark.parametrize(
    ("query", "scopes", "k", "message"),
    [
        ("  ", ["global"], 10, "Say what to search for"),
        ("x", ["../x"], 10, "not a memory scope"),
        ("x", ["global"], 0, "k is 1 to 100"),
    ],
)
def test_bad_searches_are_refused(query: str, scopes: list[str], k: int, message: str) -> None:
    with pytest.raises(NoteError, match=message):
        search.search(query, scopes=scopes, k=k)


def test_an_unknown_scope_finds_nothing() -> None:
    assert search.search("anything", scopes=["project/404"]) == []


@pytest.mark.parametrize(
    ("exact_up_to", "beam", "through_index"),
    [
        (search.EXACT_UP_TO, search.BEAM, False),  # a small scope: the exact scan
        (0, search.BEAM, False),  # a sliver of the index, no beam wide enough: exact
        (0, 5, True),  # the index tried, too few of its neighbours kept: exact again
    ],
)
def test_a_small_scope_beside_a_big_one_is_found_by_meaning(
    monkeypatch: pytest.MonkeyPatch, exact_up_to: int, beam: int, through_index: bool
) -> None:
    """pgvector's HNSW filters after its scan: a scope that is a sliver of the index must still
    get its nearest notes (the exact scan, or the index with its fallback)."""
    monkeypatch.setattr(search, "EXACT_UP_TO", exact_up_to)
    monkeypatch.setattr(search, "BEAM", beam)
    monkeypatch.setattr(search, "MIN_BEAM", beam)
    _invoices()
    (pet,) = store.write("project/small", [Draft("Owner's dog", "A beagle called Biscuit.")],
                         author="run:2", message="pet")  # fmt: skip
    embeddings.embed_pending()

    with _statements() as statements:
        hits = search.search("which animal lives with the owner?", scopes=["project/small"])

    assert [hit.path for hit in hits] == [pet]
    assert any("ef_search" in sql for sql, _params in statements) == through_index


def test_a_sixth_of_the_index_is_read_through_it_with_the_widest_beam(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scope too small a share of the index for `BEAM` to fit, but not for `MIN_BEAM`: the
    index at pgvector's widest beam, not the exact scan (50 ms at 20,000 notes)."""
    monkeypatch.setattr(search, "EXACT_UP_TO", 0)
    _invoices()
    pets = store.write(
        "project/small",
        [Draft(f"Pet {n}", f"A beagle called Biscuit {n}.") for n in range(25)],
        author="run:2", message="pets",
    )  # fmt: skip
    embeddings.embed_pending()

    with _statements() as statements:
        hits = search.search("which animal lives with the owner?", scopes=["project/small"])

    beams = [params[0] for sql, params in statements if "ef_search" in sql]
    # 25 of 145 notes: 150 of the beam fit in the scope (870 wide), `BEAM` would not (1,160).
    assert math.ceil(search.BEAM / (25 / 145)) > search.MAX_BEAM
    assert beams == [search.MAX_BEAM]
    assert hits
    assert {hit.path for hit in hits} <= set(pets)


def _invoices() -> None:
    """A scope of 120 notes, none of them about animals."""
    store.write(
        "project/big",
        [Draft(f"Invoice {n} paid", f"Invoice number {n} was paid by bank transfer.")
         for n in range(120)],
        author="run:1", message="invoices",
    )  # fmt: skip


@contextlib.contextmanager
def _statements() -> Iterator[list[tuple[str, Any]]]:
    """The SQL statements sent on the connection inside the block, with their parameters."""
    sent: list[tuple[str, Any]] = []

    def noted(run: Any, sql: str, params: Any, *rest: Any) -> Any:
        sent.append((sql, params))
        return run(sql, params, *rest)

    with connection.execute_wrapper(noted):
        yield sent


def test_a_scope_that_is_most_of_the_index_is_searched_through_it_as_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above `EXACT_UP_TO` notes the HNSW index answers: on a scope holding nearly all of it,
    the same nearest notes as the exact scan."""
    store.write(
        "project/big",
        [Draft(f"Trip {n}", f"Day {n} of the trip: {place}.")
         for n, place in enumerate(["a beach", "a museum", "a hike", "a market", "a castle"] * 8)],
        author="run:1", message="trip",
    )  # fmt: skip
    store.write("project/other", [Draft("Dog", "A beagle.")], author="run:2", message="pet")
    embeddings.embed_pending()
    found: list[list[str]] = []
    for exact_up_to in (10_000, 0):
        monkeypatch.setattr(search, "EXACT_UP_TO", exact_up_to)
        with _statements() as statements:
            hits = search.search("where did we go swimming?", scopes=["project/big"], k=30)
        found.append([hit.path for hit in hits])
        assert any("ef_search" in sql for sql, _params in statements) == (exact_up_to == 0)

    assert found[0] == found[1]


def test_the_query_is_embedded_without_the_words_most_of_the_scope_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name every message starts with would pull the nearest notes towards all that person
    said: the embedding gets the rest of the question, the coverage term the name."""
    store.write(
        "chat/1",
        [Draft(f"Clara: message {n}", f"Clara: small talk number {n}.", valid_from=JAN)
         for n in range(8)]
        + [Draft("Clara: the puppy", "Clara: we adopted a beagle called Biscuit.",
                 valid_from=JAN),
           Draft("Oliver: the cat", "Oliver: my cat Pixel sleeps all day.", valid_from=JAN)],
        author="run:1", message="chat",
    )  # fmt: skip
    embeddings.embed_pending()
    embedded = _record_embedded_queries(monkeypatch)

    hits = search.search("Which pet does Clara's family have?", scopes=["chat/1"], k=2)

    assert embedded == ["Which pet does family have?"]
    assert hits[0].title == "Clara: the puppy"  # the pet, and Clara's


def _record_embedded_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the search embeds from now on, in order (each still embedded)."""
    embedded: list[str] = []
    real = embeddings.query_vector

    def recording(text: str) -> Any:
        embedded.append(text)
        return real(text)

    monkeypatch.setattr(embeddings, "query_vector", recording)
    return embedded


def test_a_long_question_is_embedded_in_a_bounded_number_of_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The embedding's cost grows with its tokens: past `MEANING_WORDS` words, the function
    words go first, then the end; a question of ordinary length is embedded whole."""
    store.write("chat/2", [Draft("Trip", "We walked to the lighthouse in Porto.")],
                author="run:1", message="trip")  # fmt: skip
    embeddings.embed_pending()
    embedded = _record_embedded_queries(monkeypatch)
    short = "Where did we walk to when we were in Porto on that trip?"
    long = (
        "When we were on that long trip to Portugal with the whole family and the dog, which"
        " lighthouse did we walk to in Porto after lunch on the second day of the holiday?"
    )

    assert search.search(short, scopes=["chat/2"])
    assert search.search(long, scopes=["chat/2"])

    assert embedded[0] == short
    assert embedded[1] == (
        "long trip Portugal whole family dog, lighthouse walk Porto lunch second day holiday?"
    )
    monkeypatch.setattr(search, "MEANING_WORDS", 5)
    assert search.search(long, scopes=["chat/2"])
    assert embedded[2] == "long trip Portugal whole family"


@pytest.mark.parametrize(
    ("author", "before", "embedded", "found"),
    [
        ("run:1", timedelta(minutes=2), True, True),
        ("run:2", timedelta(minutes=2), True, False),  # another writer's note is no context
        ("run:1", timedelta(hours=2), True, False),  # nor one written hours before
        ("run:1", timedelta(minutes=2), False, False),  # nor one without its vector yet
    ],
)
def test_a_note_that_answers_without_naming_the_subject_is_found_through_its_context(
    monkeypatch: pytest.MonkeyPatch, author: str, before: timedelta, embedded: bool, found: bool
) -> None:
    """The answer says "a whole Sunday, I didn't even get dressed" just after the portrait the
    question names: read alone, notes of other things forgotten are nearer the question (it
    comes fifth); read after the portrait, its writer's note just before it, second."""
    subject, answer = _portrait_then_sunday(author, before)
    if not embedded:  # the subject's embedding not done (killed): no context, still a search
        Note.objects.filter(path=subject).update(embedding=None)

    def first_three() -> list[str]:
        return [hit.path for hit in search.search(NEGLECT, scopes=["chat/1"], k=3)]

    assert (answer in first_three()) == found
    monkeypatch.setattr(search, "CONTEXT_WEIGHT", 0.0)
    assert answer not in first_three()
    assert answer in [hit.path for hit in search.search("whole Sunday", scopes=["chat/1"], k=1)]


def test_a_note_brought_in_by_its_context_alone_comes_back_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a meaning list of four, the answer (fifth nearest alone) enters it only as the note
    after the portrait: the context's read leaves its text out, and the hit still has it."""
    _subject, answer = _portrait_then_sunday("run:1", timedelta(minutes=2))
    monkeypatch.setattr(search, "NEAREST", 4)
    hits = {hit.path: hit for hit in search.search(NEGLECT, scopes=["chat/1"], k=4)}
    assert answer in hits
    assert hits[answer].title == SUNDAY[:60]
    assert "whole Sunday" in hits[answer].snippet
    assert hits[answer].author == "run:1"
    monkeypatch.setattr(search, "CONTEXT_WEIGHT", 0.0)
    assert answer not in [hit.path for hit in search.search(NEGLECT, scopes=["chat/1"], k=4)]


NEGLECT = "What did Maya neglect while painting her grandmother?"
SUNDAY = "Maya: A whole Sunday, I didn't even get dressed until four in the afternoon."


def _portrait_then_sunday(author: str, before: timedelta) -> tuple[str, str]:
    """Ten notes of other things forgotten, then the portrait (by `author`, `before` the answer)
    and the answer, all embedded: their paths."""
    start = datetime(2026, 1, 5, 19, 0, tzinfo=UTC)
    alone = [
        "Tomas: I keep forgetting to water the basil and it keeps forgiving me.",
        "Tomas: I forgot the oven was on and burnt the bread, no regrets.",
        "Maya: I missed my yoga class because I lost track of time at work.",
        "Tomas: My inbox is a disaster, I've given up on inbox zero.",
        "Maya: I keep meaning to get back into exercise but the sofa keeps winning.",
        "Tomas: I skipped lunch again, the deadline ate my whole day.",
        "Maya: I forgot to feed the cat this morning, she let me know all day.",
        "Tomas: I completely forgot my mum's birthday, she is still upset.",
        "Maya: I lost track of time at the museum and missed the last train.",
        "Tomas: I let the laundry pile up all week, not proud of it.",
    ]
    portrait = "Maya: Look what I painted yesterday: a portrait of my grandma! It's finally done."
    store.write(
        "chat/1",
        [Draft(text[:60], text, type="event", valid_from=start + timedelta(days=3 * (n + 1)))
         for n, text in enumerate(alone)],
        author="run:1", message="chat",
    )  # fmt: skip
    (subject,) = store.write("chat/1", [Draft(portrait[:60], portrait, type="event",
                                              valid_from=start - before)],
                             author=author, message="chat")  # fmt: skip
    (answer,) = store.write("chat/1", [Draft(SUNDAY[:60], SUNDAY, type="event", valid_from=start)],
                            author="run:1", message="chat")  # fmt: skip
    embeddings.embed_pending()
    return subject, answer


def test_notes_saying_the_same_take_one_place_among_the_hits() -> None:
    """A chat greets alike every session: three copies of a greeting are one hit, and the
    places the others would have taken go to other notes. The same note in another scope is
    a hit of its own."""
    greeting = "Melanie: Oh perfect timing, I just got home. How are you doing?"
    sessions = [JAN + timedelta(days=7 * n) for n in range(3)]
    store.write(
        "chat/3",
        [Draft("Greeting", greeting, valid_from=at) for at in sessions]
        + [Draft("Home", "Melanie: home at last, the flat in Hamburg is tiny but bright.",
                 valid_from=MAR),
           Draft("Work", "Melanie: doing fine at the new job, the team is kind.", valid_from=MAR)],
        author="run:1", message="chat",
    )  # fmt: skip
    store.write("chat/4", [Draft("Greeting", greeting, valid_from=JAN)], author="run:2",
                message="chat")  # fmt: skip
    embeddings.embed_pending()

    hits = search.search("How are you doing, just got home?", scopes=["chat/3"], k=3)

    assert [hit.title for hit in hits].count("Greeting") == 1
    assert len(hits) == 3
    both = search.search("How are you doing, just got home?", scopes=["chat/3", "chat/4"], k=3)
    assert {hit.scope for hit in both if hit.title == "Greeting"} == {"chat/3", "chat/4"}


def test_the_words_too_common_to_pick_matches_still_rank_them() -> None:
    """The word "move" is in too many of the scope's notes to pick the words list's matches,
    which "Melanie" picks; among those, the note that also says "moved" comes first, before
    notes naming her twice."""
    store.write(
        "chat/5",
        [Draft(f"Move {n}", f"Jon: the move of box {n} is done, next move tomorrow.",
               valid_from=JAN + timedelta(minutes=n)) for n in range(12)]
        + [Draft(f"Chat {n}", f"Melanie: yes, Melanie here, tea {n}.", valid_from=JAN)
           for n in range(3)]
        + [Draft("Delay", "Melanie: the new job starts later, so we moved the date.",
                 valid_from=JAN)]
        + [Draft(f"Tea {n}", f"Ana: tea number {n} is ready.", valid_from=JAN) for n in range(20)],
        author="run:1", message="chat",
    )  # fmt: skip
    found = search._look_up("What held up Melanie's move?", ["chat/5"])
    assert found is not None
    # too common to pick matches (as `_full_text` decides)
    assert found.counts["move"] > max(search.COMMON_FRACTION * found.size, search.MIN_COMMON)

    ranked = search._full_text(found, MAR)

    assert ranked[0]["title"] == "Delay"
    assert {row["title"] for row in ranked} == {"Delay", "Chat 0", "Chat 1", "Chat 2"}
