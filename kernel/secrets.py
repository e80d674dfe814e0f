"""Secrets out of what is kept: every secret value the product holds, and the shapes secrets
commonly take, replaced by `[secret]` before a text is written where a model, a log or the owner's
memory could read it back.

Apps register where their secrets are (`register`: a function returning the current values, e.g.
the provider keys). Two speeds:
- `scrub` asks every source at each call: a key set a moment ago, in any process, is known at
  once. For rare writes (memory notes, commit messages, error texts).
- `scrub_value` (the journal's results and events, provider requests, logs) uses the known values
  as of at most `CACHE_SECONDS` ago (at once in this process after `forget()`), compiled with the
  shapes into one pattern: a text with nothing to hide costs one regex search, no copy. It lives
  in the kernel because the journal writes through it and the kernel imports no application.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

logger = logging.getLogger(__name__)

MARK = "[secret]"
MIN_SECRET = 8  # shorter values would blank ordinary words
# Keys of provider payloads holding signed or encrypted blobs (thinking signatures, encrypted
# reasoning): never scrubbed, a changed byte would make the provider refuse the request.
PROVIDER_OPAQUE = frozenset({"signature", "encrypted_content", "data"})
CACHE_SECONDS = 2.0  # how stale `scrub_value`'s known values may be (other processes' changes)

_SHAPES = (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
    r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}",  # Anthropic, OpenAI
    r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}",  # GitHub
    r"\bgithub_pat_[A-Za-z0-9_]{40,}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",  # AWS access key id
    r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # JWT
    r"\baosr1\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}",  # our own per-run tokens
    r"(?<=(?i:bearer) )[A-Za-z0-9._~+/=-]{20,}",
    r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)",  # user:password in a URL
)
SHAPES = re.compile("|".join(_SHAPES))

_sources: list[Callable[[], Iterable[str]]] = []
# (loaded at, known values longest first, the values and shapes as one pattern)
_compiled: tuple[float, tuple[str, ...], re.Pattern[str]] = (float("-inf"), (), SHAPES)
_compile_lock = threading.Lock()
# Set while this thread asks the sources: a source that logs (or fails, and is logged) reaches
# `LogFilter` again, which then scrubs with the previous pattern instead of recursing.
_asking = threading.local()


def register(source: Callable[[], Iterable[str]]) -> None:
    """Add a source of secret values."""
    if source not in _sources:
        _sources.append(source)
        forget()


def forget() -> None:
    """Ask the sources again at the next `scrub_value` (a secret was just set here)."""
    global _compiled
    _compiled = (float("-inf"), _compiled[1], _compiled[2])


def scrub(text: str) -> str:
    """`text` with every known secret value (asked now) and every secret-shaped string replaced."""
    for value in _known():
        if value in text:
            text = text.replace(value, MARK)
    return SHAPES.sub(MARK, text)


def scrub_value(value: Any, *, opaque: frozenset[str] = frozenset()) -> Any:
    """`value` (a string, or JSON-like lists and dicts of them) with its secrets replaced; the same
    object when there is none, so a clean journal write copies nothing. Values under a key in
    `opaque` are kept as they are (a provider's signed or encrypted blobs, which a shape could
    match by chance and which nobody reads)."""
    pattern = _pattern()
    return _walk(value, pattern, opaque)


def contains_secret(text: str) -> bool:
    return _pattern().search(text) is not None


def _walk(value: Any, pattern: re.Pattern[str], opaque: frozenset[str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(MARK, value) if pattern.search(value) else value
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key in opaque:
                out[key] = item
                continue
            new_key = _walk(key, pattern, opaque) if isinstance(key, str) else key
            new_item = _walk(item, pattern, opaque)
            changed = changed or new_key is not key or new_item is not item
            out[new_key] = new_item
        return out if changed else value
    if isinstance(value, list | tuple):
        items = [_walk(item, pattern, opaque) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


def _pattern() -> re.Pattern[str]:
    global _compiled
    loaded_at, known, pattern = _compiled
    if time.monotonic() - loaded_at < CACHE_SECONDS or getattr(_asking, "busy", False):
        return pattern
    if _in_event_loop():
        # Sources read the database, which an event loop's thread may not do; a log line
        # written there is scrubbed with what the last synchronous caller learnt.
        return pattern
    with _compile_lock:
        _asking.busy = True
        try:
            fresh = tuple(_known())
        finally:
            _asking.busy = False
        if fresh != known:
            # Known values first and longest first: a value is replaced whole, never a shape
            # inside it first.
            alternatives = [re.escape(value) for value in fresh] + list(_SHAPES)
            pattern = re.compile("|".join(alternatives))
        _compiled = (time.monotonic(), fresh, pattern)
    return pattern


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _known() -> list[str]:
    found: set[str] = set()
    for source in list(_sources):
        try:
            found.update(v for v in source() if v and len(v) >= MIN_SECRET)
        except Exception:  # a source that cannot answer must not stop a write
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
