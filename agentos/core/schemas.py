"""Field types shared by the API's schemas."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def _storable(value: str) -> str:
    # PostgreSQL text cannot hold NUL: refused as input (422), never met later as a DataError.
    if "\x00" in value:
        raise ValueError("NUL characters are not allowed")
    return value


Text = Annotated[str, AfterValidator(_storable)]
"""A string the database can store: any text but NUL."""
