"""The memory evaluation: a question set (memory/proving/evalsets.py) asked of `memory_search`,
next to a grep.

Each conversation of the set becomes its own scope, `eval/<name>-<digest>/<conversation>`
(`<name>-<digest>-pad<N>` with padding), its documents are written through `store.write` with
their time as `valid_from`, and each question is searched in its conversation's scope only. The
digest is the documents': a rerun on the same file writes nothing new (the store does not add a
note twice) and takes its embeddings back from the cache, while a changed file gets scopes of its
own instead of finding the old version's notes beside the new ones.

Measures, over the top k results:

- hit@k: the share of questions with at least one evidence document among the top k;
- MRR: the mean over questions of 1/rank of the first evidence document, 0 when none is in the
  top k (MRR@k: a hit at rank 11 counts as a miss, as it does for hit@k);
- the grep baseline on the same notes: a document's score is the number of distinct non-stopword
  query words it contains (lowercased, as a substring, like `grep -i`); documents that contain
  none are not results; ties go to the newest document;
- p95 search latency: `perf_counter` around the search call only, after one untimed warm-up
  search (the embedding model loads on first use), by the nearest-rank method.

`--pad-to N` pads one scope, the conversation with the most questions (the first of equals), with
synthetic notes until it holds N, and measures latency there: its own questions are scored as
usual (against the padding too, grep included), then every question of the data set is searched
in it, timed but not scored, in a pass of its own (not between the greps), for enough samples.
Padding one scope rather than each keeps a 100,000-note run at 100,000 embeddings, not that many
per conversation; the other conversations' small scopes are still searched beside the big one, as
a project's is next to `global`.

The padding is text from a word-pair chain over the other conversations' documents (all of them
for a one-conversation set), seeded by the data set's and the conversation's names: the same
style and vocabulary as the real notes, so it competes with them in full text and vectors, but
no copy of the padded conversation's own facts, which would be relevant notes scored as misses.

Loading, the grep, the metrics and the padding text need no database; `run` needs a `Memory`
(`StoreMemory` is the real one).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from memory import embeddings, search, store
from memory.progress import Progress
from memory.proving.evalsets import Conversation, Dataset, Document, Question, slug
from memory.proving.scoring import Report, Scores

PAD_BATCH = 2000  # notes per store.write (one commit each) while padding
AUTHOR = "memory_eval"
NOTE_TYPE = "event"  # each document is something said at a time

Say = Callable[[str], None]


# --- scopes ------------------------------------------------------------------------------------


def scopes(dataset: Dataset, *, pad_to: int = 0) -> dict[str, str]:
    """Conversation id → its scope: named by the data set and its documents' digest, and the
    padding (another size is another scope, not a bigger one)."""
    base = f"{slug(dataset.name)[:40]}-{digest(dataset)}" + (f"-pad{pad_to}" if pad_to else "")
    return {c.id: f"eval/{base}/{slug(c.id)}" for c in dataset.conversations}


def digest(dataset: Dataset) -> str:
    """Of what the scopes hold: every conversation's documents."""
    content = hashlib.sha256()
    for conversation in dataset.conversations:
        for document in conversation.documents:
            line = [conversation.id, document.id, document.text, document.time.isoformat()]
            content.update(json.dumps(line).encode() + b"\n")
    return content.hexdigest()[:8]


# --- the grep baseline -------------------------------------------------------------------------

# A common English list (NLTK's, with the contractions' fragments): question words are in it, so
# "when did Maya…" does not match every message that says "did".
STOPWORDS = frozenset(
    """
    a about above after again against ain all am an and any are aren as at be because been before
    being below between both but by can couldn d did didn do does doesn doing don down during each
    few for from further had hadn has hasn have haven having he her here hers herself him himself
    his how i if in into is isn it its itself just ll m ma me mightn more most mustn my myself
    needn no nor not now o of off on once only or other our ours ourselves out over own re s same
    shan she should shouldn so some such t than that the their theirs them themselves then there
    these they this those through to too under until up ve very was wasn we were weren what when
    where which while who whom why will with won wouldn y you your yours yourself yourselves
    """.split()  # noqa: SIM905 -- a word list reads better as words than as 150 quoted strings
)
_WORD = re.compile(r"[^\W_]+")  # letters and digits, in any script


def query_words(text: str) -> list[str]:
    """The query's distinct non-stopword words, lowercased, in order."""
    words = dict.fromkeys(_WORD.findall(text.lower()))
    return [word for word in words if word not in STOPWORDS]


def grep(query: str, documents: Sequence[Document], k: int) -> list[str]:
    """Document ids of the top k: most distinct query words contained, then newest, then last
    in the data set."""
    words = query_words(query)
    scored = []
    for index, document in enumerate(documents):
        text = document.text.lower()
        score = sum(word in text for word in words)
        if score:
            scored.append((score, document.time, index, document.id))
    scored.sort(reverse=True)
    return [doc_id for _, _, _, doc_id in scored[:k]]


# --- metrics -----------------------------------------------------------------------------------


def first_relevant_rank(
    ranked: Sequence[str | Collection[str]], evidence: Iterable[str], k: int
) -> int | None:
    """1-based rank of the first evidence document in the top k, None if none is there. A
    result is a document id, or the ids of the documents one note stands for."""
    relevant = set(evidence)
    for rank, result in enumerate(ranked[:k], start=1):
        ids = {result} if isinstance(result, str) else result
        if not relevant.isdisjoint(ids):
            return rank
    return None


# --- padding -----------------------------------------------------------------------------------


def padded_conversation(dataset: Dataset) -> Conversation:
    """The conversation whose scope `--pad-to` fills: the one with the most questions."""
    return max(dataset.conversations, key=lambda conversation: len(conversation.questions))


class Chain:
    """A word-pair (bigram) chain: each word followed by one of the words that follow it in the
    source texts. Texts start as sources start (with a speaker's name, in a chat)."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.starts: list[str] = []
        self.next: dict[str, list[str]] = {}
        for text in texts:
            words = text.split()
            if not words:
                continue
            self.starts.append(words[0])
            for word, following in itertools.pairwise(words):
                self.next.setdefault(word, []).append(following)

    def text(self, rng: random.Random, *, shortest: int = 10, longest: int = 40) -> str:
        """Words until a sentence ends past `shortest` words, or `longest` words."""
        words = [rng.choice(self.starts)]
        while len(words) < longest:
            if len(words) >= shortest and words[-1].endswith((".", "!", "?")):
                break
            choices = self.next.get(words[-1])
            if not choices:
                break
            words.append(rng.choice(choices))
        return " ".join(words)


def padding(dataset: Dataset, conversation: Conversation, count: int) -> list[Document]:
    """`count` synthetic documents for `conversation`'s scope, the same for the same data set:
    chain text from the other conversations, times spread over the conversation's span."""
    others = [c for c in dataset.conversations if c.id != conversation.id] or [conversation]
    chain = Chain(document.text for other in others for document in other.documents)
    # Seeded so two runs pad alike; a data set, not a secret.
    rng = random.Random(f"{dataset.name}/{conversation.id}")  # noqa: S311
    times = [document.time for document in conversation.documents] or [datetime.now(UTC)]
    start, span = min(times), max(times) - min(times)
    taken = {document.id for document in conversation.documents}
    documents = []
    for index in range(count):
        # A padding id never equals a real one, so it is never relevant.
        doc_id = f"padding-{index}"
        while doc_id in taken:
            doc_id = f"_{doc_id}"
        at = start + timedelta(seconds=rng.uniform(0, span.total_seconds()))
        documents.append(Document(id=doc_id, text=chain.text(rng), time=at))
    return documents


# --- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    title: str
    body: str
    time: datetime


def note_of(document: Document) -> Note:
    """The note a document becomes: its text, titled by its first words."""
    return Note(title=title_of(document.text), body=document.text, time=document.time)


def title_of(text: str, limit: int = 60) -> str:
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]
    return f"{cut}…"


class Memory(Protocol):
    """What the evaluation needs of memory; `StoreMemory` is the real one."""

    def write(self, scope: str, notes: Sequence[Note], *, message: str) -> list[str]:
        """The notes' paths, in order."""
        ...

    def holds(self, scope: str, note: Note) -> bool:
        """Whether `write` would find this note already in the scope."""
        ...

    def embed_pending(self, scope: str) -> int: ...

    def search(self, query: str, scope: str, k: int) -> list[str]:
        """The paths of the top k notes."""
        ...


class StoreMemory:
    """memory.store, memory.search and memory.embeddings; `progress` shows a long embedding
    (a padded scope's first run)."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.progress = progress

    def write(self, scope: str, notes: Sequence[Note], *, message: str) -> list[str]:
        drafts = [
            store.Draft(title=note.title, body=note.body, type=NOTE_TYPE, valid_from=note.time)
            for note in notes
        ]
        return store.write(scope, drafts, author=AUTHOR, message=message)

    def holds(self, scope: str, note: Note) -> bool:
        draft = store.Draft(title=note.title, body=note.body, type=NOTE_TYPE, valid_from=note.time)
        return store.holds(scope, draft, author=AUTHOR)

    def embed_pending(self, scope: str) -> int:
        return embeddings.embed_pending(scope, progress=self.progress)

    def search(self, query: str, scope: str, k: int) -> list[str]:
        return [hit.path for hit in search.search(query, scopes=[scope], k=k)]


def run(
    dataset: Dataset,
    memory: Memory,
    *,
    k: int = 10,
    pad_to: int = 0,
    busy: bool = False,
    say: Say = print,
) -> Report:
    """Write, pad, embed, then ask every question of memory and of the grep.

    1. Each conversation's documents go into its scope in one write; the paths it returns map
       search hits back to document ids.
    2. With `pad_to`, the padded conversation's scope gets synthetic notes in batches of
       PAD_BATCH until it holds `pad_to`; a batch already there is not written again.
    3. Every scope's embeddings are computed before any search.
    4. One untimed warm-up search, then each question in its own scope (timed when no scope is
       padded); with padding, every question again in the padded scope, timed only.
    5. With `busy`, the timed searches once more while another process keeps a core busy.
    """
    scope_of = scopes(dataset, pad_to=pad_to)
    say(f"scopes {next(iter(scope_of.values())).rsplit('/', 1)[0]}/…")
    held = write_conversations(dataset, memory, scope_of)

    padded = padded_conversation(dataset) if pad_to else None
    padded_scope = None
    if padded is not None:
        padded_scope = scope_of[padded.id]
        extra = padding(dataset, padded, max(0, pad_to - len(padded.documents)))
        write_padding(dataset, memory, padded_scope, extra, say=say)
        held.corpus[padded_scope].extend(extra)

    started = time.perf_counter()
    embedded = sum(memory.embed_pending(scope) for scope in scope_of.values())
    say(f"{embedded:,} embeddings computed in {time.perf_counter() - started:.0f} s")

    # Untimed: the model loads on the first query; warm the scope whose latency counts.
    warm = padded or dataset.conversations[0]
    memory.search(dataset.name, scope_of[warm.id], k)

    asked = ask_all(dataset, memory, scope_of, held, k=k, padded_scope=padded_scope)
    busy_ms = timed_while_busy(dataset, memory, scope_of, k=k, padded=padded) if busy else []
    return Report(
        name=dataset.name,
        k=k,
        memory=asked.memory,
        grep=asked.grep,
        latencies_ms=asked.latencies_ms,
        notes=max(len(documents) for documents in held.corpus.values()),
        padded=asked.padded if padded is not None else None,
        busy_latencies_ms=busy_ms,
    )


@dataclass
class Held:
    """What the scopes hold once written, per scope: note path → the ids of the documents it
    stands for (two documents saying the same at the same time are one note: the store does not
    add a note twice), and the documents themselves, for the grep."""

    documents_at: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    corpus: dict[str, list[Document]] = field(default_factory=dict)


def write_conversations(dataset: Dataset, memory: Memory, scope_of: dict[str, str]) -> Held:
    """Each conversation's documents into its scope, in one write."""
    held = Held()
    for conversation in dataset.conversations:
        scope = scope_of[conversation.id]
        paths = memory.write(
            scope,
            [note_of(document) for document in conversation.documents],
            message=f"Evaluation {dataset.name}: conversation {conversation.id}",
        )
        at = held.documents_at[scope] = {}
        for path, document in zip(paths, conversation.documents, strict=True):
            at.setdefault(path, set()).add(document.id)
        held.corpus[scope] = list(conversation.documents)
    return held


def write_padding(
    dataset: Dataset, memory: Memory, scope: str, extra: Sequence[Document], *, say: Say
) -> None:
    """The padding into its scope, PAD_BATCH notes per write, skipping batches already there."""
    started = time.perf_counter()
    written = 0
    for first in range(0, len(extra), PAD_BATCH):
        batch = [note_of(document) for document in extra[first : first + PAD_BATCH]]
        # A batch is one commit, written in order: its last note in the scope means all of it
        # is, so a rerun checks one note per batch instead of writing them all again.
        if memory.holds(scope, batch[-1]):
            continue
        memory.write(
            scope,
            batch,
            message=f"Evaluation {dataset.name}: padding {first + 1}-{first + len(batch)}",
        )
        written += len(batch)
        say(f"padding {scope}: {first + len(batch):,} of {len(extra):,} notes written")
    say(
        f"padding: {written:,} notes written, {len(extra) - written:,} already there,"
        f" in {time.perf_counter() - started:.0f} s"
    )


@dataclass
class Asked:
    """The scores so far, of memory, of the grep and of the padded scope's own questions, and
    the timed searches' latencies."""

    memory: Scores = field(default_factory=Scores)
    grep: Scores = field(default_factory=Scores)
    padded: Scores = field(default_factory=Scores)
    latencies_ms: list[float] = field(default_factory=list)


def ask_all(
    dataset: Dataset,
    memory: Memory,
    scope_of: dict[str, str],
    held: Held,
    *,
    k: int,
    padded_scope: str | None,
) -> Asked:
    """Every question in its own scope, scored (and timed when no scope is padded); then, with a
    padded scope, every question of the data set in it, timed but not scored: enough latency
    samples at scale, in a pass of their own. Timed between the scoring's greps, a search
    would pay for the grep's 100,000 documents going through the caches before it (p95 +10
    ms at 100,000 notes, measured), which is the benchmark's cost, not the search's."""
    asked = Asked()
    for conversation in dataset.conversations:
        scope = scope_of[conversation.id]
        for question in conversation.questions:
            ask(question, scope, memory, held, asked, k=k, padded_scope=padded_scope)
    if padded_scope is not None:
        asked.latencies_ms = [
            timed_search(memory, question.text, padded_scope, k)[1]
            for conversation in dataset.conversations
            for question in conversation.questions
        ]
    return asked


def ask(
    question: Question,
    scope: str,
    memory: Memory,
    held: Held,
    asked: Asked,
    *,
    k: int,
    padded_scope: str | None,
) -> None:
    """One question, of memory and of the grep, in its conversation's scope. Its search is timed
    when no scope is padded (with one, `ask_all` times every question there)."""
    paths, elapsed_ms = timed_search(memory, question.text, scope, k)
    if padded_scope is None:
        asked.latencies_ms.append(elapsed_ms)
    rank = first_relevant_rank(
        [held.documents_at[scope].get(path, set()) for path in paths], question.evidence, k
    )
    asked.memory.add(question.category, rank)
    if scope == padded_scope:
        asked.padded.add(question.category, rank)
    grep_ranked = grep(question.text, held.corpus[scope], k)
    asked.grep.add(question.category, first_relevant_rank(grep_ranked, question.evidence, k))


def timed_while_busy(
    dataset: Dataset,
    memory: Memory,
    scope_of: dict[str, str],
    *,
    k: int,
    padded: Conversation | None,
) -> list[float]:
    """Every question searched again (in the padded scope, if any; else in its own), timed,
    while another process spins on one core: what a search costs when the machine is not
    the search's alone."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        spin_until_running(spinner.pid)
        return [
            timed_search(memory, question.text, scope_of[(padded or conversation).id], k)[1]
            for conversation in dataset.conversations
            for question in conversation.questions
        ]
    finally:
        spinner.kill()
        spinner.wait()


def spin_until_running(pid: int, deadline_s: float = 10.0) -> None:
    """Until the process has had a tenth of a second of CPU (its interpreter started)."""
    stat = Path(f"/proc/{pid}/stat")
    ticks = os.sysconf("SC_CLK_TCK")
    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        if int(fields[11]) >= ticks // 10:  # utime, in clock ticks
            return
        time.sleep(0.02)
    raise RuntimeError("The busy process did not start.")


def timed_search(memory: Memory, query: str, scope: str, k: int) -> tuple[list[str], float]:
    """The search's paths, and its time in ms: `perf_counter` around the call only."""
    started = time.perf_counter()
    paths = memory.search(query, scope, k)
    return paths, (time.perf_counter() - started) * 1e3
