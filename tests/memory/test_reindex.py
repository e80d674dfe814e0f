"""`memory_reindex` brings the index fully back, vectors included: identical texts embedded once,
a reindex SIGKILLed between two embedding batches leaves the index as it was and its rerun
re-embeds none of the batches already cached, and the progress bar says where it is."""

from __future__ import annotations

import io
import os
import signal
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psutil
import pytest
from django.core.management import call_command
from django.db import connection

from memory import embeddings, graph, reindexing, store
from memory.models import EmbeddingCache, Note
from memory.progress import Progress
from memory.store import Draft
from tests.memory.test_consistency import dump
from tests.memory.test_word_counts import counted, recounted
from tests.processes import run_django

JAN = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)
SCOPE = "project/7"


def drafts(count: int, *, distinct: int | None = None) -> list[Draft]:
    """`count` notes, each its own time; their texts cycle through `distinct` ones."""
    distinct = distinct or count
    return [
        Draft(f"Fact {n % distinct}", f"Body of fact {n % distinct}.",
              valid_from=JAN + timedelta(minutes=n))
        for n in range(count)
    ]  # fmt: skip


@pytest.mark.django_db
def test_it_rebuilds_the_index_equal_to_the_one_before() -> None:
    paths = store.write(SCOPE, drafts(30), author="run:1", message="thirty")
    store.invalidate(SCOPE, paths[3], author="run:2", reason="wrong")
    embeddings.embed_pending()
    before = dump()

    rebuilt = reindexing.reindex(SCOPE)

    assert dump() == before
    assert rebuilt == reindexing.Rebuilt(notes=30, texts=30, embedded=0, without_vector=0)
    assert counted() == recounted()


@pytest.mark.django_db
def test_it_keeps_the_rows_equal_to_the_repository_and_rebuilds_the_others() -> None:
    store.write(SCOPE, drafts(8), author="run:1", message="eight")
    embeddings.embed_pending()
    before = dump()
    ids = dict(Note.objects.values_list("title", "id"))
    Note.objects.filter(title="Fact 1").update(title="Tampered")  # its words change with it
    Note.objects.filter(title="Fact 2").update(confidence=0.9)
    other = Note.objects.get(title="Fact 4").embedding
    Note.objects.filter(title="Fact 3").update(embedding=other)
    Note.objects.filter(title="Fact 5").update(verified_by="owner")

    reindexing.reindex(SCOPE)

    assert dump() == before
    assert counted() == recounted()
    after = dict(Note.objects.values_list("title", "id"))
    assert {title for title in after if after[title] != ids.get(title)} == {
        "Fact 1", "Fact 2", "Fact 3", "Fact 5"
    }  # fmt: skip


@pytest.mark.django_db
def test_it_computes_the_vectors_the_cache_lacks_each_text_once() -> None:
    store.write(SCOPE, drafts(12, distinct=5), author="run:1", message="twelve")
    assert not EmbeddingCache.objects.exists()

    rebuilt = reindexing.reindex(SCOPE, batch=2)

    assert rebuilt == reindexing.Rebuilt(notes=12, texts=5, embedded=5, without_vector=0)
    assert EmbeddingCache.objects.count() == 5
    rows = Note.objects.filter(scope__name=SCOPE).order_by("valid_from")
    vectors = [np.asarray(row.embedding) for row in rows]
    assert all(vector is not None for vector in vectors)
    np.testing.assert_array_equal(vectors[0], vectors[5])  # Fact 0, twice
    expected = embeddings.passage_vectors([embeddings.text_of("Fact 1", "Body of fact 1.")])[0]
    np.testing.assert_allclose(vectors[1], expected, atol=1e-6)
    assert reindexing.reindex(SCOPE).embedded == 0  # the text unchanged: nothing re-embedded


@pytest.mark.django_db
def test_a_note_written_during_the_reindex_is_in_the_rebuilt_index_with_its_vector() -> None:
    store.write(SCOPE, drafts(6), author="run:1", message="six")

    class Writing(Progress):
        def phase(self, name: str, total: int) -> None:
            super().phase(name, total)
            if name == "embedding":  # after the repository was read, before the swap
                store.write(SCOPE, [Draft("Late fact", "Written meanwhile.")], author="run:3",
                            message="late")  # fmt: skip

    rebuilt = reindexing.reindex(SCOPE, progress=Writing(None))

    assert rebuilt.notes == 7
    assert rebuilt.embedded == 7
    late = Note.objects.get(scope__name=SCOPE, title="Late fact")
    assert late.embedding is not None
    assert not Note.objects.filter(embedding__isnull=True).exists()


# Killed once two batches of 8 are cached, after printing its children (the pool's processes);
# `{pool_at}`: how many texts make the reindex embed on a pool.
KILLED = textwrap.dedent(
    """
    import os, signal
    import psutil
    from memory import embeddings, reindexing
    from memory.progress import Progress

    embeddings.POOL_AT = {pool_at}

    class Killed(Progress):
        def advance(self, count=1):
            super().advance(count)
            if self.name == "embedding" and self.done >= 16:
                print(" ".join(str(c.pid) for c in psutil.Process().children()), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

    reindexing.reindex("project/7", progress=Killed(None), batch=8)
    """
)


@pytest.mark.django_db(transaction=True)
def test_a_reindex_killed_between_batches_leaves_the_index_and_reruns_from_there(
    memory_dir: Path,
) -> None:
    store.write(SCOPE, drafts(40), author="run:1", message="forty")
    # The worker embedded them as they were written: a new database of the same repositories.
    EmbeddingCache.objects.all().delete()
    Note.objects.update(embedding=None)
    before = dump()
    assert all(row[-1] is None for row in before)  # no vector yet: all 40 to embed

    done = run_django(KILLED.format(pool_at=embeddings.POOL_AT),
                      env={**os.environ, "AGENTOS_MEMORY_DIR": str(memory_dir)})  # fmt: skip

    assert done.returncode == -signal.SIGKILL, done.stderr
    assert dump() == before  # the index untouched: killed before its rows were swapped
    assert counted() == recounted()
    assert EmbeddingCache.objects.count() == 16

    rebuilt = reindexing.reindex(SCOPE, batch=8)

    assert rebuilt.embedded == 24  # the two batches cached before the kill are not computed again
    assert EmbeddingCache.objects.count() == 40
    assert not Note.objects.filter(embedding__isnull=True).exists()
    assert [row[:-1] for row in dump()] == [row[:-1] for row in before]
    assert counted() == recounted()


@pytest.mark.django_db
def test_many_texts_are_embedded_by_a_pool_of_processes_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = {embeddings.digest(f"Fact {n}: the kiln fires at dawn."): f"Fact {n}: the kiln fires"
             f" at dawn." for n in range(12)}  # fmt: skip
    here = embeddings.passage_vectors(list(texts.values()))
    monkeypatch.setattr(embeddings, "POOL_AT", 1)

    def not_here(texts: object) -> None:
        raise AssertionError("embedded in the process that reindexes, not in the pool")

    monkeypatch.setattr(embeddings, "passage_vectors", not_here)

    assert embeddings.compute(texts, batch=4) == 12

    cached = dict(EmbeddingCache.objects.values_list("digest", "vector"))
    pooled = np.array([cached[d] for d in texts], np.float32)
    assert (pooled * here).sum(axis=1).min() > 0.99999


@pytest.mark.django_db(transaction=True)
def test_a_reindex_killed_while_its_pool_embeds_leaves_no_process_behind(
    memory_dir: Path,
) -> None:
    store.write(SCOPE, drafts(40), author="run:1", message="forty")
    EmbeddingCache.objects.all().delete()
    Note.objects.update(embedding=None)
    before = dump()

    # Returns once the pool's processes let go of its output: they end with the killed one.
    done = run_django(KILLED.format(pool_at=1),
                      env={**os.environ, "AGENTOS_MEMORY_DIR": str(memory_dir)})  # fmt: skip

    assert done.returncode == -signal.SIGKILL, done.stderr
    pool = [int(pid) for pid in done.stdout.split()]
    assert len(pool) >= 2, done.stdout  # one process per core
    deadline = time.monotonic() + 10
    while (left := [pid for pid in pool if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"the pool's processes {left} outlived the reindex"
    assert dump() == before
    assert EmbeddingCache.objects.count() == 16  # the batches in flight were lost, not cached

    assert reindexing.reindex(SCOPE, batch=8).embedded == 24


def _alive(pid: int) -> bool:
    try:  # a zombie has ended; only its parent's reaping is left
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Phases(Progress):
    def __init__(self) -> None:
        super().__init__(None)
        self.seen: list[str] = []

    def phase(self, name: str, total: int) -> None:
        super().phase(name, total)
        self.seen.append(name)


def index_definition() -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [graph.INDEX])
        found = cursor.fetchone()
    return None if found is None else str(found[0])


@pytest.mark.django_db
def test_a_reindex_writing_most_rows_builds_the_vector_graph_after_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(graph, "REBUILT_FROM", 10)
    store.write("project/8", drafts(60), author="run:1", message="sixty elsewhere")
    store.write(SCOPE, drafts(12), author="run:1", message="twelve")
    embeddings.embed_pending()
    before, defined = dump(), index_definition()
    assert defined is not None
    assert "hnsw" in defined

    Note.objects.filter(scope__name=SCOPE).delete()  # a new database of the same repositories
    phases = Phases()
    reindexing.reindex(SCOPE, progress=phases)

    assert graph.PHASE not in phases.seen  # 12 rows of 72: the graph grown by each
    assert dump() == before

    Note.objects.all().delete()
    phases = Phases()
    reindexing.reindex("project/8", progress=phases)
    reindexing.reindex(SCOPE, progress=phases)

    assert phases.seen.count(graph.PHASE) == 1  # 60 rows of 60, then 12 of 72
    assert index_definition() == defined
    assert dump() == before
    with connection.cursor() as cursor:  # the graph holds the rows written before its build
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL hnsw.ef_search = 1000")  # the whole graph read
        cursor.execute(
            "SELECT count(*) FROM (SELECT id FROM memory_note ORDER BY embedding <=> %s::vector"
            " LIMIT 100) found",
            [str(embeddings.query_vector("fact").tolist())],
        )
        assert cursor.fetchone() == (72,)


@pytest.mark.django_db
def test_many_notes_lacking_vectors_are_embedded_first_then_given_them_in_a_graph_built_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store.write(SCOPE, drafts(30), author="run:1", message="thirty")
    embeddings.embed_pending()
    vectors = dict(Note.objects.values_list("title", "embedding"))
    Note.objects.update(embedding=None)  # a data set written in bulk, its vectors to come
    EmbeddingCache.objects.all().delete()
    monkeypatch.setattr(embeddings, "POOL_AT", 20)
    monkeypatch.setattr(graph, "REBUILT_FROM", 20)
    defined, built = index_definition(), _index_oid()
    written: list[str] = []

    assert embeddings.embed_pending(SCOPE, progress=Progress(written.append)) == 30

    phases = [line.split(" 0/")[0].strip() for line in written if " 0/" in line]
    # What a long embedding shows, in order; no graph built around the first fill from the
    # cache, which has none of these vectors yet (it held the table for nothing).
    assert phases == ["embedding", graph.PHASE]
    assert "30/30" in next(line for line in reversed(written) if line.startswith("embedding"))
    assert index_definition() == defined
    assert _index_oid() != built  # dropped and built again, not grown by each row
    again = dict(Note.objects.values_list("title", "embedding"))
    assert set(again) == set(vectors)
    pairs = np.array([(again[t], vectors[t]) for t in sorted(vectors)], np.float32)
    assert (pairs[:, 0] * pairs[:, 1]).sum(axis=1).min() > 0.99999


def _index_oid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::regclass::oid", [graph.INDEX])
        return int(cursor.fetchone()[0])


KILLED_IN_THE_GRAPH = textwrap.dedent(
    """
    import os, signal
    from memory import graph, reindexing
    from memory.progress import Progress

    graph.REBUILT_FROM = 10

    class Killed(Progress):
        def phase(self, name, total):
            super().phase(name, total)
            if name.startswith("building the vector graph"):  # dropped, the rows written
                os.kill(os.getpid(), signal.SIGKILL)

    reindexing.reindex("project/7", progress=Killed(None))
    """
)


@pytest.mark.django_db(transaction=True)
def test_a_reindex_killed_while_it_builds_the_graph_leaves_the_index_as_it_was(
    memory_dir: Path,
) -> None:
    store.write(SCOPE, drafts(20), author="run:1", message="twenty")
    embeddings.embed_pending()
    defined = index_definition()
    Note.objects.all().delete()

    done = run_django(KILLED_IN_THE_GRAPH, env={**os.environ,
                                                "AGENTOS_MEMORY_DIR": str(memory_dir)})  # fmt: skip

    assert done.returncode == -signal.SIGKILL, done.stderr
    assert index_definition() == defined
    assert not Note.objects.exists()


@pytest.mark.django_db
def test_memory_reindex_shows_its_phases_with_totals_off_a_terminal() -> None:
    store.write(SCOPE, drafts(10, distinct=4), author="run:1", message="ten")
    out, err = io.StringIO(), io.StringIO()

    call_command("memory_reindex", scope=[SCOPE], stdout=out, stderr=err)

    lines = err.getvalue().splitlines()
    assert "\r" not in err.getvalue()
    for phase, total in [("reading the repository", 10), ("vectors from cache", 4),
                         ("embedding", 4), ("indexing rows", 10)]:  # fmt: skip
        shown = [line for line in lines if line.startswith(phase)]
        assert shown, err.getvalue()
        assert f"{total:,}/{total:,}" in shown[-1]
        assert "done in" in shown[-1]
    assert out.getvalue() == f"{SCOPE}: 10 notes, 4 vectors computed\n"


@pytest.mark.django_db
def test_memory_reindex_can_leave_the_vectors_to_the_worker_pool() -> None:
    store.write(SCOPE, drafts(3), author="run:1", message="three")
    out = io.StringIO()

    call_command("memory_reindex", scope=[SCOPE], no_embed=True, stdout=out, stderr=io.StringIO())

    assert "0 vectors computed" in out.getvalue()
    assert Note.objects.filter(scope__name=SCOPE).count() == 3


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_it_writes_a_line_per_tenth_or_ten_seconds() -> None:
    written: list[str] = []
    clock = Clock()
    progress = Progress(written.append, clock=clock)

    progress.phase("embedding", 1000)
    for _ in range(25):
        clock.now += 1
        progress.advance(8)  # 8 notes/s: 10 % every 12.5 s, so the 10 s rule speaks first
    progress.finish()

    assert written[0].split() == ["embedding", "0/1,000", "0%"]
    assert len(written) == 4  # the start, at 10 s and 20 s, the end
    assert written[1].split()[1:5] == ["80/1,000", "8%", "8.0/s", "1"]
    assert written[1].endswith("55 s left\n")
    assert "200/1,000" in written[-1]


def test_on_a_terminal_it_redraws_one_line() -> None:
    written: list[str] = []
    clock = Clock()
    progress = Progress(written.append, tty=True, clock=clock)

    progress.phase("indexing rows", 10)
    clock.now += 1
    progress.advance(10)
    progress.finish()

    assert all(text.startswith("\r") for text in written)
    assert written[-1].endswith("\n")
    assert "[########################]" in written[-1]
    assert "done in 1 s" in written[-1]


def test_off_a_terminal_a_short_phase_is_its_first_and_last_lines() -> None:
    written: list[str] = []
    clock = Clock()
    progress = Progress(written.append, clock=clock)

    progress.phase("vectors from cache", 100)
    for _ in range(10):
        clock.now += 0.05
        progress.advance(10)
    progress.phase("indexing rows", 1)

    assert [line.split()[3] for line in written[:2]] == ["0/100", "100/100"]
    assert written[1].endswith("done in 0 s\n")
    assert written[2].startswith("indexing rows")


@pytest.mark.django_db
def test_the_benchmark_times_the_largest_scope_when_told() -> None:
    store.write("bench/small", drafts(3), author="run:1", message="a few")
    store.write("bench/large", drafts(12), author="run:1", message="more")
    embeddings.embed_pending()
    out = io.StringIO()

    call_command("bench_reindex", "--largest", "--any-database", stdout=out, stderr=io.StringIO())

    said = out.getvalue()
    assert "reindex benchmark: scope bench/large" in said
    assert "sampled cold reindex (12 texts out of the cache)" in said
    assert said.splitlines()[-1].startswith("cold reindex ")
    assert Note.objects.filter(scope__name="bench/large", embedding__isnull=False).count() == 12
