"""Secrets out of what is kept: every secret value the product holds, and the shapes secrets
commonly take, replaced by `[secret]` before a text is written where a model, a log or the owner's
memory could read it back.

Apps register where their secrets are (`register`: a function returning the current values, e.g.
the provider keys), asked at every call: a key set a moment ago, in any process, is known at once.
Shapes catch what was never registered (a token pasted into a tool's output).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

logger = logging.getLogger(__name__)

MARK = "[secret]"
MIN_SECRET = 8  # shorter values would blank ordinary words

SHAPES = re.compile(
    "|".join(
        (
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}",  # Anthropic, OpenAI
            r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}",  # GitHub
            r"\bgithub_pat_[A-Za-z0-9_]{40,}",
            r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
            r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",  # AWS access key id
            r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # JWT
            r"(?<=(?i:bearer) )[A-Za-z0-9._~+/=-]{20,}",
            r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)",  # user:password in a URL
        )
    )
)

_sources: list[Callable[[], Iterable[str]]] = []


def register(source: Callable[[], Iterable[str]]) -> None:
    """Add a source of secret values."""
    if source not in _sources:
        _sources.append(source)


def scrub(text: str) -> str:
    """`text` with every known secret value and every secret-shaped string replaced."""
    for value in _known():
        if value in text:
            text = text.replace(value, MARK)
    return SHAPES.sub(MARK, text)


def _known() -> list[str]:
    found: set[str] = set()
    for source in list(_sources):
        try:
            found.update(v for v in source() if v and len(v) >= MIN_SECRET)
        except Exception:  # a source that cannot answer must not stop a write
            logger.exception("a secret source failed; its values are not scrubbed this time")
    return sorted(found, key=len, reverse=True)  # longest first: no partial leftovers
