"""`memory_wordcount`: how many of a scope's notes hold each word, kept by triggers in the very
statements that change the notes, so it always equals a count made from the notes themselves."""

from __future__ import annotations

import os
from collections import Counter
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.db import connection

from memory import embeddings, store
from memory.models import Note, WordCount
from memory.store import Draft

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)
MAR = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def counted() -> Counter[tuple[int, str]]:
    """The table, as (scope id, word) → notes."""
    return Counter({(c.scope_id, c.word): c.notes for c in WordCount.objects.all()})


def recounted() -> Counter[tuple[int, str]]:
    """The same, counted from the notes' own words here (the empty word: every note)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT scope_id, tsvector_to_array(search) FROM memory_note")
        notes = cursor.fetchall()
    return Counter((scope_id, word) for scope_id, words in notes for word in ["", *(words or [])])


def test_it_counts_the_notes_of_each_word_through_every_change() -> None:
    paths = store.write(
        "project/7",
        [Draft("CI runs on Jenkins", "The job ci-main builds every branch.", valid_from=JAN),
         Draft("Staging database", "Staging runs PostgreSQL 16.", valid_from=JAN),
         Draft("Owner's dog", "A beagle called Biscuit.", valid_from=JAN)],
        author="run:1", message="facts",
    )  # fmt: skip
    store.write("project/8", [Draft("CI runs on Jenkins", "Other project.", valid_from=JAN)],
                author="run:2", message="other")  # fmt: skip
    seven = Note.objects.get(path=paths[0]).scope_id
    assert counted() == recounted()
    assert counted()[(seven, "")] == 3
    assert counted()[(seven, "run")] == 2  # "runs", stemmed, in two of its notes
    assert counted()[(seven, "jenkin")] == 1

    store.invalidate("project/7", paths[1], at=MAR, author="run:2", reason="moved")
    store.replace("project/7", paths[0], Draft("CI runs on GitHub Actions", "Since March."),
                  author="run:3")  # fmt: skip
    embeddings.embed_pending()  # an embedding filled in changes no count
    assert counted() == recounted()
    assert counted()[(seven, "")] == 4
    assert counted()[(seven, "github")] == 1

    Note.objects.filter(path=paths[2]).update(title="Owner's cat", body="A tabby.")
    assert counted() == recounted()
    assert (seven, "beagl") not in counted()  # a word no note holds any more has no row
    assert counted()[(seven, "tabbi")] == 1

    Note.objects.filter(scope_id=seven).delete()
    assert counted() == recounted()
    assert not any(scope == seven for scope, _word in counted())


def test_memory_reindex_reproduces_the_counts() -> None:
    store.write(
        "project/7",
        [Draft(f"Fact {n}", f"Body of fact {n}, about {'cats' if n % 2 else 'dogs'}.",
               valid_from=JAN) for n in range(20)],
        author="run:1", message="twenty",
    )  # fmt: skip
    before = counted()

    call_command("memory_reindex", stdout=open(os.devnull, "w"))  # noqa: SIM115, PTH123

    assert counted() == before == recounted()
    assert before[(Note.objects.first().scope_id, "cat")] == 10  # type: ignore[union-attr]


def test_the_migration_counts_the_notes_already_indexed() -> None:
    store.write(
        "project/7",
        [Draft(f"Fact {n}", f"Body of fact {n}.", valid_from=JAN) for n in range(5)],
        author="run:1", message="five",
    )  # fmt: skip
    with connection.cursor() as cursor:  # the test's transaction: its foreign keys checked now,
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # or no table may be dropped in it
    quiet = open(os.devnull, "w")  # noqa: SIM115, PTH123
    call_command("migrate", "memory", "0003", stdout=quiet)
    call_command("migrate", "memory", stdout=quiet)

    assert counted() == recounted()
    assert len(recounted()) > 5
