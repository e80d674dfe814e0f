"""Secrets out of what is kept: every secret value the product holds, and the shapes secrets
commonly take, replaced by `[secret]` before a text is written where a model, a log or the owner's
memory could read it back.

Apps register where their secrets are in `SECRET_SOURCES` (by name, a function returning the
current values, e.g. the provider keys), from their `AppConfig.ready()`. Two speeds:
- `scrub` asks every source at each call: a key set a moment ago, in any process, is known at
  once. For rare writes (memory notes, commit messages, error texts).
- `scrub_value` (the journal's results and events, provider requests, logs) uses the known values
  as of at most `CACHE_SECONDS` ago (at once in this process after `forget()`): a text with
  nothing to hide costs a few substring tests (each shape has a literal anchor) and no copy.

It sits in the bottom package (it imports no app): the kernel's journal writes through it, and
the apps register their secrets with it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agentos.core import jsontext, reachability
from agentos.core.registries import Registry

logger = logging.getLogger(__name__)

MARK = "[secret]"
MIN_SECRET = 8  # shorter values would blank ordinary words
# Keys of provider payloads holding signed or encrypted blobs (thinking signatures, encrypted
# reasoning): never scrubbed, a changed byte would make the provider refuse the request.
PROVIDER_OPAQUE = frozenset({"signature", "encrypted_content", "data"})
CACHE_SECONDS = 2.0  # how stale `scrub_value`'s known values may be (other processes' changes)

# Each shape starts with a literal (its anchor), so a text without the anchor is skipped by a
# substring test, and the pattern itself scans at the speed of a substring search (`\b` or a
# lookbehind first would make the regex engine try every position: 40 times slower). Word
# boundaries are checked by a lookbehind after the literal. (anchors, pattern, replacement)
_FAST: tuple[tuple[tuple[str, ...], re.Pattern[str], str], ...] = tuple(
    (anchors, re.compile(pattern), replacement)
    for anchors, pattern, replacement in (
        (
            ("-----BEGIN ",),
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            MARK,
        ),
        (("sk-",), r"sk-(?<!\wsk-)(?:ant-|proj-)?[A-Za-z0-9_-]{20,}", MARK),  # Anthropic, OpenAI
        (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"gh[pousr]_(?<!\wgh._)[A-Za-z0-9]{30,}", MARK),
        (("github_pat_",), r"github_pat_(?<!\wgithub_pat_)[A-Za-z0-9_]{40,}", MARK),
        (("glpat-",), r"glpat-(?<!\wglpat-)[A-Za-z0-9_-]{20,}", MARK),  # GitLab
        (("xox",), r"xox[abposr]-(?<!\wxox.-)[A-Za-z0-9-]{10,}", MARK),  # Slack
        (("AKIA",), r"AKIA(?<!\wAKIA)[A-Z0-9]{16}\b", MARK),  # AWS access key ids
        (("ASIA",), r"ASIA(?<!\wASIA)[A-Z0-9]{16}\b", MARK),
        (
            ("eyJ",),
            r"eyJ(?<!\weyJ)[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # JWT
            MARK,
        ),
        (("aosr1.",), r"aosr1\.(?<!\waosr1\.)[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}", MARK),
        (("earer ", "EARER "), r"((?i:bearer) )[A-Za-z0-9._~+/=-]{20,}", rf"\1{MARK}"),
        (("://",), r"(://)[^/\s:@]+:[^/\s@]+@", rf"\1{MARK}@"),  # user:password in a URL
    )
)
# The same shapes as one pattern, for callers that match rather than replace.
SHAPES = re.compile(
    "|".join(
        [
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}",
            r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}",
            r"\bgithub_pat_[A-Za-z0-9_]{40,}",
            r"\bglpat-[A-Za-z0-9_-]{20,}",
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
            r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
            r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
            r"\baosr1\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}",
            r"(?<=(?i:bearer) )[A-Za-z0-9._~+/=-]{20,}",
            r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)",
        ]
    )
)

_ANCHORS = [anchor for anchors, _pattern, _replacement in _FAST for anchor in anchors]


# What JSON (ASCII) escapes inside a string: a text holding none of these reads the same in a
# document.
_JSON_ESCAPED = re.compile(r'[^\x20-\x7e]|["\\]')


@dataclass(frozen=True)
class _Known:
    values: tuple[str, ...]  # longest first
    # Any anchor or known value: one scan of a text says whether anything needs looking at.
    gate: re.Pattern[str]
    # Whether the gate finds in a value's JSON text whatever it would find in the value's strings
    # (no anchor, and no known value, holds a character JSON escapes): see `_clean_json`.
    gate_reads_json: bool


def _known_of(values: tuple[str, ...]) -> _Known:
    return _Known(
        values,
        re.compile("|".join(re.escape(item) for item in [*values, *_ANCHORS])),
        not any(_JSON_ESCAPED.search(item) for item in [*values, *_ANCHORS]),
    )


# (loaded at, what is known)
_known_cache: tuple[float, _Known] = (float("-inf"), _known_of(()))
_cache_lock = threading.Lock()
# Set while this thread asks the sources: a source that logs (or fails, and is logged) reaches
# `LogFilter` again, which then scrubs with the values known before instead of recursing.
_asking = threading.local()


def forget() -> None:
    """Ask the sources again at the next `scrub_value` (a secret was just set here)."""
    global _known_cache
    _known_cache = (float("-inf"), _known_cache[1])


# Where the secret values are: name -> a function returning the current ones. A source added or
# removed is asked at the next `scrub_value`.
SECRET_SOURCES: Registry[Callable[[], Iterable[str]]] = Registry("secret source", on_change=forget)


def scrub(text: str) -> str:
    """`text` with every known secret value (asked now) and every secret-shaped string replaced."""
    return _clean(text, _known_of(tuple(_known())))


def scrub_value(value: Any, *, opaque: frozenset[str] = frozenset()) -> Any:
    """`value` (a string, or JSON-like lists and dicts of them) with its secrets replaced; the same
    object when there is none, so a clean journal write copies nothing. Values under a key in
    `opaque` are kept as they are (a provider's signed or encrypted blobs, which a shape could
    match by chance and which nobody reads)."""
    known = _recent()
    if not isinstance(value, str) and _clean_json(value, known) is not None:
        return value
    return _walk(value, known, opaque)


def scrub_json(value: Any) -> str:
    """`scrub_value(value)` as JSON text: what the journal stores. A clean value is encoded
    once, for the scan and for the database alike. Raises `TypeError` for a value that is not
    JSON, as `json.dumps` does."""
    known = _recent()
    text = _clean_json(value, known)
    return text if text is not None else _encode(_walk(value, known, frozenset()))


# `json.dumps` without spaces: what psycopg sent before (non-ASCII escaped, so a lone surrogate
# is refused by the database as it was), a little shorter to scan.
_encode = jsontext.encoder(sort_keys=False)


def _clean_json(value: Any, known: _Known) -> str | None:
    """`value`'s JSON text when no string in it (key or value) needs scrubbing, else None (also
    when it is not JSON: the walk then keeps what it cannot read as it is).

    A result is mostly clean: one C encoding and one scan of the whole document, instead of a
    Python walk over every key and string. Sound because JSON copies a string's characters as
    they are except the escaped ones, which no gate literal holds (`gate_reads_json`); a gate
    found across strings, or in an opaque value, only sends the value down the walk.
    """
    if not known.gate_reads_json:
        return None
    try:
        text = _encode(value)
    except (TypeError, ValueError, RecursionError):
        return None
    return text if known.gate.search(text) is None else None


def contains_secret(text: str) -> bool:
    return _clean(text, _recent()) is not text


def _clean(text: str, known: _Known) -> str:
    """`text` cleaned; the very same object when nothing was found."""
    if known.gate.search(text) is None:
        return text
    out = text
    for value in known.values:  # longest first: a value is replaced whole, never a shape in it
        if value in out:
            out = out.replace(value, MARK)
    for anchors, pattern, replacement in _FAST:
        if any(anchor in out for anchor in anchors):
            out = pattern.sub(replacement, out)
    return text if out == text else out


def _walk(value: Any, known: _Known, opaque: frozenset[str]) -> Any:
    if isinstance(value, str):
        return _clean(value, known)
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key in opaque:
                out[key] = item
                continue
            new_key = _clean(key, known) if isinstance(key, str) else key
            new_item = _walk(item, known, opaque)
            changed = changed or new_key is not key or new_item is not item
            out[new_key] = new_item
        return out if changed else value
    if isinstance(value, list | tuple):
        items = [_walk(item, known, opaque) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


def _recent() -> _Known:
    """The known values as of at most `CACHE_SECONDS` ago."""
    global _known_cache
    loaded_at, known = _known_cache
    if time.monotonic() - loaded_at < CACHE_SECONDS or getattr(_asking, "busy", False):
        return known
    if _in_event_loop():
        # Sources read the database, which an event loop's thread may not do; a log line
        # written there is scrubbed with what the last synchronous caller learnt.
        return known
    with _cache_lock:
        _asking.busy = True
        try:
            values = tuple(_known(previous=known.values))
        finally:
            _asking.busy = False
        if values != known.values:
            known = _known_of(values)
        _known_cache = (time.monotonic(), known)
    return known


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _known(*, previous: Iterable[str] = ()) -> list[str]:
    found: set[str] = set()
    for source in SECRET_SOURCES.values():
        try:
            found.update(v for v in source() if v and len(v) >= MIN_SECRET)
        except Exception as error:  # a source that cannot answer must not stop a write
            if reachability.is_unreachable(error):
                # The database is away (its loops say so once): keep scrubbing what was known,
                # and write no traceback per log line about it.
                found.update(previous)
                continue
            logger.exception("a secret source failed; its values are not scrubbed this time")
    return sorted(found, key=lambda v: (-len(v), v))  # longest first: no partial leftovers


class LogFilter(logging.Filter):
    """Scrubs every record a handler emits (message, arguments, traceback). Installed on the root
    handlers by the settings' LOGGING."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's to report, not ours
            return True
        record.msg = scrub_value(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub_value(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub_value(record.stack_info)
        return True
