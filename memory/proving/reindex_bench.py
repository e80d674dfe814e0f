"""The reindex benchmark (`manage.py bench_reindex --notes N`): how fast `memory_reindex` brings
a scope of N notes back, against the target of 100,000 notes in 20 minutes on two cores.

1. N synthetic notes (short chat lines, like a conversation's) are written once into a scope of
   their own, `store.write` in batches of `evaluation.PAD_BATCH`, a batch already there skipped;
   one untimed reindex then puts every text's vector in the cache (kept between runs).
2. Warm: the scope reindexed with its index intact and every vector in the cache — nothing
   embedded, every row compared and kept (what a reindex "to be sure" costs).
3. Sampled cold: the cache emptied for `SAMPLE` of the scope's texts, the scope reindexed again;
   its embedding phase gives the engine's notes per second on this machine. Before step 4: the
   100,000 rows that step deletes would set the database's autovacuum to work beside it.
4. Rows rebuilt: the scope's rows deleted, then reindexed — every row inserted with its vector
   from the cache (what a new database of the same repositories costs, embedding aside).
5. Projections: a cold reindex of N, and of 100,000, notes is step 4's time scaled by the notes
   plus every note embedded at the measured rate. The sample is large enough for the embedding
   pool's start (about 2 s, paid once by a reindex) to weigh little on the rate.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Count

from memory import embeddings, graph, reindexing, store
from memory.models import EmbeddingCache, Note, Scope
from memory.progress import Progress, duration
from memory.proving import evaluation

TARGET_NOTES = 100_000
TARGET_SECONDS = 20 * 60
SAMPLE = 4000
AUTHOR = "bench:reindex"
START = datetime(2026, 1, 1, tzinfo=UTC)
SPEAKERS = ("Ana", "Ben", "Chloé", "Dmitri", "Esra", "Farid")
# Words of a team's chat; the lines are drawn from them, seeded, so every run writes alike.
CHAT = (
    "we moved the standup to tuesday at ten because the release review ran long and the"
    " database migration needs another pass before friday so I will ask the customer about the"
    " invoice again tomorrow morning while you check the search index and the cache of vectors"
    " that the worker fills after each write; the budget for the trip to Lisbon is approved but"
    " the hotel near the station is full, can you book the other one, my daughter starts school"
    " next week and I need the afternoons free, the bug in the export only shows with long"
    " titles, merge the branch once the tests are green, the backup ran at three and took"
    " twelve minutes, remember the dentist on monday, our planning for the second quarter lists"
    " four projects and the hiring of two engineers"
)
WORDS = CHAT.split()

Say = Callable[[str], None]


class Timed(Progress):
    """A progress bar that also keeps each phase's duration and size."""

    def __init__(self, write: Callable[[str], object] | None, *, tty: bool = False) -> None:
        super().__init__(write, tty=tty)
        self.phases: dict[str, tuple[float, int]] = {}

    def finish(self) -> None:
        if self.open:
            self.phases[self.name] = (self.clock() - self.started, self.total)
        super().finish()


def scope_of(count: int) -> str:
    return f"bench/reindex-{count}"


def synthetic(count: int) -> list[store.Draft]:
    """`count` chat lines of 8 to 30 words, each its own time (and so its own note)."""
    rng = random.Random(f"reindex/{count}")  # noqa: S311  # a data set, not a secret
    drafts = []
    for index in range(count):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
        text = f"{rng.choice(SPEAKERS)}: {words} (#{index})"
        at = START + timedelta(minutes=index)
        drafts.append(store.Draft(evaluation.title_of(text), text, type="event", valid_from=at))
    return drafts


def prepare(count: int, *, progress: Progress, say: Say) -> str:
    """The scope holding `count` notes, each text's vector cached (step 1)."""
    scope = scope_of(count)
    drafts = synthetic(count)
    started = time.perf_counter()
    written = 0
    for first in range(0, count, evaluation.PAD_BATCH):
        batch = drafts[first : first + evaluation.PAD_BATCH]
        # One commit per batch, in order: its last note there means all of it is.
        if store.holds(scope, batch[-1], author=AUTHOR):
            continue
        store.write(scope, batch, author=AUTHOR, message=f"Reindex benchmark: notes {first}…")
        written += len(batch)
        say(f"  wrote {first + len(batch):,}/{count:,} notes")
    if written:
        say(f"{written:,} notes written in {duration(time.perf_counter() - started)}")
    reindexing.reindex(scope, progress=progress)
    progress.finish()
    return scope


def forget_sample(scope: str, size: int) -> int:
    """The cache rows of `size` of the scope's texts deleted (a seeded sample); how many."""
    texts = sorted(
        {
            embeddings.digest(embeddings.text_of(title, body))
            for title, body in Note.objects.filter(scope__name=scope).values_list("title", "body")
        }
    )
    sample = random.Random(scope).sample(texts, min(size, len(texts)))  # noqa: S311
    deleted, _kinds = EmbeddingCache.objects.filter(
        model=embeddings.MODEL, digest__in=sample
    ).delete()
    return deleted


@dataclass(frozen=True)
class Figures:
    notes: int
    warm_seconds: float  # step 2, the whole reindex
    rebuilt_seconds: float  # step 4, the whole reindex
    rows_seconds: float  # step 4, its rows and the vector graph's build
    embedded: int
    embedding_seconds: float

    @property
    def notes_per_second(self) -> float:
        return self.embedded / self.embedding_seconds if self.embedding_seconds else 0.0

    def cold_seconds(self, notes: int) -> float:
        rate = self.notes_per_second
        rows = self.rebuilt_seconds * notes / self.notes
        return rows + (notes / rate if rate else float("inf"))

    def lines(self) -> list[str]:
        scale = TARGET_NOTES / self.notes
        target = f"target {TARGET_NOTES:,} notes in {duration(TARGET_SECONDS)}"
        cold = self.cold_seconds(TARGET_NOTES)
        rate = self.notes_per_second
        return [
            f"rows rebuilt    {self.notes / self.rows_seconds:>8,.0f} rows/s"
            f"   ({TARGET_NOTES:,} in {duration(self.rows_seconds * scale)}; reindex of an"
            f" empty index {duration(self.rebuilt_seconds * scale)}; {target})",
            f"warm reindex    {duration(self.warm_seconds):>8} for {self.notes:,} notes"
            f"   ({duration(self.warm_seconds * scale)} projected for {TARGET_NOTES:,};"
            f" {target})",
            f"embedding       {rate:>8,.1f} notes/s   ({self.embedded:,} texts;"
            f" {TARGET_NOTES:,} in {duration(TARGET_NOTES / rate) if rate else '?'}; {target})",
            f"cold reindex    {duration(self.cold_seconds(self.notes)):>8} projected for"
            f" {self.notes:,} notes   ({duration(cold)} projected for {TARGET_NOTES:,}; {target}:"
            f" {'met' if cold <= TARGET_SECONDS else 'MISSED'})",
        ]


def largest_scope() -> str | None:
    """The scope of the database holding the most notes (a padded evaluation's, in
    `make bench-memory`): timed instead of synthetic notes, steps 2 to 4 alike."""
    row = Scope.objects.annotate(size=Count("notes")).filter(size__gt=0).order_by("-size").first()
    return row.name if row is not None else None


def run(
    count: int, *, progress: Callable[[], Timed], say: Say, scope: str | None = None
) -> Figures:
    """Steps 1 to 4 of the module (step 1 skipped for a `scope` already there); the figures
    step 5 projects."""
    if scope is None:
        say(f"reindex benchmark: {count:,} notes in scope {scope_of(count)}")
        scope = prepare(count, progress=progress(), say=say)
    else:
        say(f"reindex benchmark: scope {scope}")
        reindexing.reindex(scope, progress=progress())  # every vector cached, as in step 1

    _warm, warm_seconds = _timed("warm reindex (index intact, every vector cached)", scope,
                                progress, say)  # fmt: skip
    forgotten = forget_sample(scope, SAMPLE)
    cold, _seconds = _timed(f"sampled cold reindex ({forgotten:,} texts out of the cache)",
                            scope, progress, say)  # fmt: skip
    embedding_seconds, embedded = cold.phases.get("embedding", (0.0, 0))

    Note.objects.filter(scope__name=scope).delete()
    rebuilt, rebuilt_seconds = _timed("reindex of an empty index", scope, progress, say)
    rows_seconds, rows = rebuilt.phases["indexing rows"]
    rows_seconds += rebuilt.phases.get(graph.PHASE, (0.0, 0))[0]
    return Figures(
        notes=rows,
        warm_seconds=warm_seconds,
        rebuilt_seconds=rebuilt_seconds,
        rows_seconds=rows_seconds,
        embedded=embedded,
        embedding_seconds=embedding_seconds,
    )


def _timed(title: str, scope: str, progress: Callable[[], Timed], say: Say) -> tuple[Timed, float]:
    """One reindex of the scope, its phases said; its progress and its time."""
    # The machine may be shared: a busy one runs slower, and says so next to the figures.
    say(f"{title}, load average {os.getloadavg()[0]:.1f}:")
    timed = progress()
    started = time.perf_counter()
    rebuilt = reindexing.reindex(scope, progress=timed)
    seconds = time.perf_counter() - started
    _phases(timed, say)
    say(f"  {'the whole reindex':<24} {rebuilt.notes:>9,} in {seconds:7.2f} s")
    return timed, seconds


def _phases(timed: Timed, say: Say) -> None:
    for name, (seconds, total) in timed.phases.items():
        say(f"  {name:<24} {total:>9,} in {seconds:7.2f} s")
