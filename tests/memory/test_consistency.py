"""The repository is the truth: `memory_reindex` rebuilds exactly the index the writes made, and a
writer SIGKILLed before or after its commit leaves a repository and an index that agree once
caught up."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from memory import embeddings, repository, search, store
from memory.models import Note, Scope
from memory.store import Draft
from tests.memory.test_word_counts import counted, recounted
from tests.processes import run_django

JAN = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)


def dump() -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT s.name, s.head, n.path, n.blob, n.note_id, n.type, n.title, n.body, n.author,
                   n.source_events::text, n.verified, n.verified_by, n.verified_at, n.confidence,
                   n.valid_from, n.invalid_at,
                   n.search::text, n.embedding::text
            FROM memory_note n JOIN memory_scope s ON s.id = n.scope_id ORDER BY 1, 3
            """
        )
        return list(cursor.fetchall())


@pytest.mark.django_db
def test_memory_reindex_reproduces_the_index_exactly() -> None:
    paths = store.write(
        "project/7",
        [Draft(f"Fact {n}", f"Body of fact {n}.", valid_from=JAN, source_events=(n,))
         for n in range(30)],
        author="run:1", message="thirty",
    )  # fmt: skip
    store.invalidate("project/7", paths[3], author="run:2", reason="wrong")
    store.write("global", [Draft("Owner prefers short answers", "Always.")], author="owner",
                message="pref")  # fmt: skip
    embeddings.embed_pending()
    before = dump()

    call_command("memory_reindex", stdout=open(os.devnull, "w"))  # noqa: SIM115, PTH123

    assert dump() == before
    assert len(before) == 31


def writer(memory_dir: Path, kill: str) -> subprocess.CompletedProcess[str]:
    """A process that writes one note and SIGKILLs itself just `before` or `after` the commit
    to the repository (inside the write's transaction)."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from memory import repository, store
        real = repository.commit
        def commit(*args, **kwargs):
            if {kill!r} == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            done = real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        repository.commit = commit
        store.write("project/7", [store.Draft("Killed write", "Mid-write.")], author="run:9",
                    message="killed")
        """
    )
    return run_django(script, env={**os.environ, "AGENTOS_MEMORY_DIR": str(memory_dir)})


@pytest.mark.django_db(transaction=True)
def test_a_writer_killed_after_its_commit_is_caught_up(memory_dir: Path) -> None:
    store.write("project/7", [Draft("Earlier fact", "Kept.", valid_from=JAN)], author="run:1",
                message="earlier")  # fmt: skip
    indexed_head = Scope.objects.get(name="project/7").head

    done = writer(memory_dir, "after")

    assert done.returncode == -signal.SIGKILL, done.stderr
    assert repository.head("project/7") != indexed_head  # the commit landed...
    assert Scope.objects.get(name="project/7").head == indexed_head  # ...its index did not
    assert not Note.objects.filter(title="Killed write").exists()
    store.sync("project/7")
    assert counted() == recounted()
    caught_up = dump()
    assert Note.objects.filter(title="Killed write").count() == 1
    assert Scope.objects.get(name="project/7").head == repository.head("project/7")
    store.reindex("project/7")
    assert dump() == caught_up
    embeddings.embed_pending()
    assert search.search("killed write", scopes=["project/7"])[0].title == "Killed write"


@pytest.mark.django_db(transaction=True)
def test_a_writer_killed_before_its_commit_leaves_nothing(memory_dir: Path) -> None:
    store.write("project/7", [Draft("Earlier fact", "Kept.", valid_from=JAN)], author="run:1",
                message="earlier")  # fmt: skip
    tip = repository.head("project/7")

    done = writer(memory_dir, "before")

    assert done.returncode == -signal.SIGKILL, done.stderr
    assert repository.head("project/7") == tip
    assert not Note.objects.filter(title="Killed write").exists()
    assert counted() == recounted()  # the word counts went with the rows the kill undid
    before = dump()
    store.reindex("project/7")
    assert dump() == before
