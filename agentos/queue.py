"""The huey worker pool's queue, kept in PostgreSQL (no Redis).

huey's own `SqlStorage` (peewee, `FOR UPDATE SKIP LOCKED` claims) with one change: its tables live
in a `huey` schema, created by migration `kernel.0001`, so they never clash with ours and exist
in every database Django migrates (test databases included).
"""

from __future__ import annotations

from typing import Any

from huey.api import Huey
from huey.contrib.sql_huey import SqlStorage

SCHEMA = "huey"


class PostgresStorage(SqlStorage):  # type: ignore[misc]  # huey ships no type hints
    def __init__(self, name: str = "huey", database: Any = None, **kwargs: Any) -> None:
        # Tables come from migrations; peewee must not create them in `public` on import.
        super().__init__(name=name, database=database, create_tables=False, **kwargs)

    def create_models(self) -> tuple[Any, ...]:
        models: tuple[Any, ...] = super().create_models()
        for model in models:
            model._meta.schema = SCHEMA
        return models


class PostgresHuey(Huey):  # type: ignore[misc]  # huey ships no type hints
    storage_class = PostgresStorage
