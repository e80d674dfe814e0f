"""The PostgreSQL index of the memory repositories: derived, rebuilt from them by
`manage.py memory_reindex`, never the truth."""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models.functions import Lower
from django.utils.translation import gettext_lazy as _
from pgvector.django import HnswIndex, VectorField

DIMENSIONS = 384  # multilingual-e5-small
TEXT_SEARCH = "english"


class Scope(models.Model):
    """A memory scope and the commit of its repository the index reflects."""

    name = models.CharField(_("scope"), max_length=200, unique=True)
    head = models.CharField(max_length=40, blank=True)
    # The newest index row consolidation has looked at (`memory.consolidation`).
    consolidated_through = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Note(models.Model):
    """One note of a scope at the commit its scope's `head` names."""

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="notes")
    path = models.CharField(max_length=300)
    blob = models.CharField(max_length=40)  # git's id of the file: the version indexed
    note_id = models.CharField(max_length=120)
    type = models.CharField(max_length=20)
    title = models.CharField(max_length=200)
    body = models.TextField()
    author = models.CharField(max_length=100)
    source_events = models.JSONField(default=list)
    verified = models.BooleanField(default=False)
    # The owner's act that verified it, and when (`memory.notes`): never set by a run.
    verified_by = models.CharField(max_length=100, blank=True)
    verified_at = models.DateTimeField(null=True)
    confidence = models.FloatField(default=0.5)
    valid_from = models.DateTimeField()
    invalid_at = models.DateTimeField(null=True)
    # Set by a trigger (migration 0002) from title (weight A) and body (B), English stemming.
    # Not a generated field: Django checks those against a live database, even offline.
    search = SearchVectorField(null=True, editable=False)
    embedding = VectorField(dimensions=DIMENSIONS, null=True, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "path"], name="memory_note_path_unique")
        ]
        indexes = [
            GinIndex(fields=["search"], name="memory_note_search"),
            HnswIndex(
                name="memory_note_embedding",
                fields=["embedding"],
                # A better-connected graph than pgvector's default (16, 64): a question's
                # vector lies apart from the notes' ones, where a sparser graph's search loses
                # its way (memory/migrations/0007_vector_graph.py).
                m=32,
                ef_construction=200,
                opclasses=["vector_cosine_ops"],
            ),
            models.Index(fields=["scope", "valid_from"], name="memory_note_scope_valid"),
            # A note's context in search (`memory.search._in_context`): the notes its writer put
            # just before and after it, found in a few index entries however many other writers'
            # notes, or notes of the same moment, the scope holds.
            models.Index(
                fields=["scope", "author", "valid_from", "id"], name="memory_note_writer_time"
            ),
            # Consolidation looks notes up by subject.
            models.Index("scope", "type", Lower("title"), name="memory_note_subject"),
        ]

    def __str__(self) -> str:
        return f"{self.scope_id}:{self.path}"


class WordCount(models.Model):
    """How many of a scope's notes hold a word (a lexeme of their `search`); the empty word
    counts every note of the scope. Kept by triggers (migration 0004) in the statement that
    inserts, deletes or changes notes, so it is never out of step with them; what lets a
    search weigh its words, and know the scope's size, without counting notes."""

    pk = models.CompositePrimaryKey("scope", "word")
    # The primary key's first column serves the foreign key: no index of its own.
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+", db_index=False)
    word = models.TextField(blank=True)
    notes = models.IntegerField()

    class Meta:
        indexes = [
            # The whole index's size, summed over scopes (search's HNSW beam depends on it).
            models.Index(
                fields=["scope"],
                include=["notes"],
                condition=models.Q(word=""),
                name="memory_wordcount_size",
            )
        ]

    def __str__(self) -> str:
        return f"{self.scope_id}:{self.word}={self.notes}"


class EmbeddingCache(models.Model):
    """A text's embedding by a model: what makes a rebuilt index identical, and cheap."""

    model = models.CharField(max_length=60)
    digest = models.CharField(max_length=64)  # sha256 of the embedded text
    vector = VectorField(dimensions=DIMENSIONS)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["model", "digest"], name="memory_embedding_unique")
        ]

    def __str__(self) -> str:
        return f"{self.model}:{self.digest[:12]}"
