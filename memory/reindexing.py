"""A scope's index rebuilt from its repository, vectors included (`manage.py memory_reindex`).

1. The notes of the repository's tip are read, outside any lock (one `cat-file --batch`).
2. The cache is asked which of their texts it lacks a vector for.
3. Those are embedded here (on a pool of processes for many: `embeddings.compute`), each
   distinct text once, in batches whose cache rows commit as they go; the index is not touched
   yet, so a reindex killed here leaves the index as it was, and a rerun finds the batches done
   in the cache (it re-embeds at most the batches in flight when it was killed).
4. One transaction under the scope's lock makes the scope's rows those of the notes read
   (`store.reindex`): a row equal to what it would be is kept, any other written anew with its
   vector from the cache; searches see the old rows until it commits. Other scopes' rows are
   left alone; the HNSW index all scopes share is dropped and built again after the rows when
   they are many (`memory.graph`): every scope's searches and writes then wait for the commit.
5. Notes written meanwhile (the tip moved between 1 and 4) are caught up in 4 and embedded last.

Without embedding (`embed=False`) steps 2, 3 and 5 are left to the worker pool, as after a write.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from memory import bulk, embeddings, notes, repository, store
from memory.models import Note
from memory.progress import Progress


@dataclass(frozen=True)
class Rebuilt:
    notes: int  # in the rebuilt index
    texts: int  # distinct texts among them
    embedded: int  # vectors this reindex computed (one per distinct text)
    without_vector: int  # notes left for the worker pool (`embed=False`)


def reindex(
    scope: str,
    *,
    embed: bool = True,
    progress: Progress | None = None,
    batch: int = embeddings.BATCH,
) -> Rebuilt:
    """The scope's index rebuilt from its repository, every vector there (see the module)."""
    notes.check_scope(scope)
    progress = progress or Progress.quiet()
    tip = repository.head(scope)
    files = bulk.note_files(scope, tip)
    progress.phase("reading the repository", len(files))
    tree = bulk.Tree(tip, bulk.read(scope, files, progress))
    texts = {embeddings.digest(entry.text): entry.text for entry in tree.entries}
    embedded = 0
    if embed:
        progress.phase("vectors from cache", len(texts))
        lacking = embeddings.uncached(texts, progress)
        progress.phase("embedding", len(lacking))
        embedded = embeddings.compute(
            {d: texts[d] for d in lacking}, progress=progress, batch=batch
        )
    count = store.reindex(scope, read=tree, progress=progress)
    pending = Note.objects.filter(scope__name=scope, embedding__isnull=True)
    if embed and pending.exists():
        progress.phase("embedding notes written meanwhile", pending.count())
        late = embeddings.embed_pending(scope)
        progress.advance(late)
        progress.finish()
        embedded += late
    elif not embed:
        transaction.on_commit(embeddings.schedule)
    return Rebuilt(notes=count, texts=len(texts), embedded=embedded, without_vector=pending.count())
