"""Background work of the memory app (huey worker pool): thin wrappers around services."""

from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import db_periodic_task, db_task

from memory import embeddings, repository, store


@db_task()  # type: ignore[untyped-decorator]  # huey ships no hints
def embed_pending_notes() -> None:
    """Vectors for notes written since the last run (a write enqueues this after it commits)."""
    embeddings.embed_pending()


@db_periodic_task(crontab(minute="*/10"))  # type: ignore[untyped-decorator]
def catch_up_memory() -> None:
    """Each scope's index at its repository's tip (a write killed between its commit and its
    index row is caught up here at the latest), and any vector still missing computed."""
    for scope in repository.scopes():
        store.sync(scope)
    embeddings.embed_pending()
