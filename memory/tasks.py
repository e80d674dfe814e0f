"""Background work of the memory app (huey worker pool): thin wrappers around services."""

from __future__ import annotations

from django.db import transaction
from huey import crontab
from huey.contrib.djhuey import db_periodic_task, db_task

from memory import consolidation, embeddings, overview, repository, store


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


def consolidate_soon(scope: str | None, *, why: str) -> None:
    """A consolidation pass of `scope` on the worker pool, once the caller's transaction commits."""
    if scope is not None:
        transaction.on_commit(lambda: consolidate_scope(scope, why))


@db_task()  # type: ignore[untyped-decorator]
def consolidate_scope(scope: str, why: str) -> None:
    consolidation.consolidate(scope, why=why)


@db_periodic_task(crontab(minute="17", hour="3"))  # type: ignore[untyped-decorator]
def consolidate_nightly() -> None:
    """Every scope, each night: what a run's end or a compaction did not reach."""
    for scope in repository.scopes():
        store.sync(scope)
    consolidation.consolidate_all(why="nightly")
    # Proposals the owner refused, or that expired with their run, leave no branch behind.
    waiting = overview.pending_branches()
    for scope in repository.scopes():
        if store.shared(scope):
            store.drop_proposals(scope, keep=waiting)
