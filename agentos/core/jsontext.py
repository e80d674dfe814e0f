"""Compact JSON text (`separators=(",", ":")`, non-ASCII escaped) from an encoder built once.

`json.dumps` with options, and even a kept `JSONEncoder`'s `encode`, builds the C encoder anew
on every call: on the journal's hot path (a request and a result a step) that was a tenth of
a step's own client time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import (  # type: ignore[attr-defined]  # C helpers, not in typeshed
    c_make_encoder,
    encode_basestring_ascii,
)
from typing import Any

quoted: Callable[[str], str] = encode_basestring_ascii  # a string as its JSON text


def not_json(value: Any) -> Any:
    """`JSONEncoder.default`'s refusal, with its message."""
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encoder(*, sort_keys: bool, default: Callable[[Any], Any] = not_json) -> Callable[[Any], str]:
    """`json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), default=default)`, byte
    for byte, for a tree: without circular-reference markers, a cycle ends in `RecursionError`
    rather than `ValueError`."""
    if c_make_encoder is None:  # a Python without the C accelerator
        return json.JSONEncoder(
            sort_keys=sort_keys, separators=(",", ":"), default=default, check_circular=False
        ).encode
    c_encode = c_make_encoder(
        None, default, encode_basestring_ascii, None, ":", ",", sort_keys, False, True
    )
    return lambda value: "".join(c_encode(value, 0))
