"""The judges of a finished mission: the only thing that decides whether a task is completed.

Coding: the task's test command runs in the sandbox of the mission's root run (its uid, no
network), on a copy of the commit the run ended with — what the mission delivered, not what it
left lying in its worktree — with the task's protected files (its tests) put back as shipped.
The host never runs what the agent wrote, nor git on its worktree: the copy is made by git
inside the sandbox, in the sandbox's private /tmp.

Research: the mission's final answer must contain the expected answer (or an accepted spelling)
as a whole token, compared without case, with spaces collapsed and digit grouping ignored.

Figures (data and financial analysis): each expected number must be in the final answer, found
under its name in a JSON object of the answer or after its label in the text, and within its
tolerance (absolute or relative).

Citations: the answer (its prose, outside its JSON) states the expected answer, and cites
passages as JSON objects `{"quote": ..., "url" | "path": ...}` (the shape `web_fetch`'s facts
have). Each cited source is fetched again — a URL from the task's own site, served by the
evaluation on 127.0.0.1 and never anything else; a path from the task's files as shipped, never
the mission's worktree, which it could have written — and each quote must occur in it
(whitespace and case aside). One quote not found fails the task, and so does an answer none of
whose quotes of the documents that support it states the answer.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.sandbox import Limits, SandboxUnavailable, for_level

ORACLE_SECONDS = 300
DETAIL_LINES = 12

# $1 is the task's test command. The committed tree is exported by git in the sandbox (the
# worktree's .git is read-only there); the protected files arrive on stdin as a tar.
SCRIPT = """\
set -eu
mkdir /tmp/oracle
git -c core.hooksPath=/dev/null -c core.fsmonitor=false archive --format=tar \
  --output=/tmp/head.tar HEAD || { echo 'oracle: the run has no commit to test'; exit 90; }
tar -x -f /tmp/head.tar -C /tmp/oracle
tar -x -f - -C /tmp/oracle
cd /tmp/oracle
exec /bin/sh -c "$1"
"""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    detail: str  # why, in a few lines: the end of the test output, or the answer's mismatch


def run_tests(
    worktree: Path, run_id: int | None, command: str, protected: dict[str, bytes]
) -> Verdict:
    """The task's test command on the last commit of `worktree`, in the sandbox of `run_id` (the
    sandbox user's without one)."""
    if not worktree.is_dir():
        return Verdict(False, "the mission's run has no worktree to test")
    try:
        done = for_level(1).run(
            ["/bin/sh", "-c", SCRIPT, "oracle", command],
            workdir=worktree,
            run_id=run_id,
            stdin=_tar(protected),
            limits=Limits(wall_seconds=ORACLE_SECONDS),
        )
    except SandboxUnavailable as error:
        return Verdict(False, f"no sandbox to run the oracle in: {error}")
    lines = done.summary().rstrip().splitlines()
    return Verdict(done.exit_code == 0, "\n".join(lines[-DETAIL_LINES:]))


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, content in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size = len(content)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def check_answer(answer: str | None, expected: list[str]) -> Verdict:
    """Whether `answer` states one of the `expected` answers."""
    if not answer or not answer.strip():
        return Verdict(False, "the mission gave no answer")
    text = normalise(answer)
    for candidate in expected:
        wanted = normalise(candidate)
        # A whole token: not inside a longer word or number ("42" is not in "142" nor "42.5").
        if re.search(rf"(?<!\w)(?<!\d[.,]){re.escape(wanted)}(?!\w)(?![.,]\d)", text):
            return Verdict(True, f"the answer states {candidate!r}")
    shown = " ".join(answer.split())
    return Verdict(False, f"expected {expected[0]!r}; the answer: {shown[:300]}")


def normalise(text: str) -> str:
    text = " ".join(text.casefold().split())
    # 12,345 / 12 345 / 12_345 -> 12345 (thousands separators only: three digits follow)
    return re.sub(r"(?<=\d)[,_\s](?=\d{3}(?!\d))", "", text)


# --- Figures ------------------------------------------------------------------------------------

# A number as written in an answer: 1,284.50 / 1 284.50 / -3.5 / 12.5% (grouping dropped later).
NUMBER = re.compile(
    r"(?<![\w.])[-+\u2212]?\d{1,3}(?:[,_ ]\d{3})+(?:\.\d+)?(?!\d)"
    r"|(?<![\w.])[-+\u2212]?\d+(?:\.\d+)?"
)
MAX_SCANNED = 200_000  # characters of an answer searched for JSON objects
MAX_STARTS = 2_000  # opening braces tried as the start of one
LABEL_GAP = 60  # characters between a label and its number: "Total revenue (EUR): 1,234.50"


def check_figures(answer: str | None, figures: list[dict[str, Any]]) -> Verdict:
    """Whether `answer` states each of `figures` ({name, value, abs | rel, label?}) within its
    tolerance."""
    if not answer or not answer.strip():
        return Verdict(False, "the mission gave no answer")
    found = _named_numbers(answer)
    problems, good = [], []
    for figure in figures:
        value = found.get(figure["name"].casefold())
        if value is None and figure.get("label"):
            value = _after_label(answer, figure["label"])
        if value is None:
            problems.append(f"{figure['name']}: not in the answer")
            continue
        expected = float(figure["value"])
        allowed = tolerance(figure)
        if abs(value - expected) > allowed:
            problems.append(
                f"{figure['name']}: {value:g}, expected {expected:g} (within {allowed:g})"
            )
        else:
            good.append(f"{figure['name']} {value:g}")
    if problems:
        return Verdict(False, "; ".join(problems))
    return Verdict(True, f"the answer states {', '.join(good)}")


def tolerance(figure: dict[str, Any]) -> float:
    """The largest difference allowed: absolute, or relative to the expected value."""
    if "abs" in figure:
        return float(figure["abs"])
    return abs(float(figure["value"])) * float(figure["rel"])


def number(text: str) -> float | None:
    """`text` as a number (grouping separators and a Unicode minus allowed), or None."""
    cleaned = re.sub(r"[,_ ]", "", text.strip()).replace("\u2212", "-")
    try:
        return float(cleaned)
    except ValueError:
        return None


def _named_numbers(answer: str) -> dict[str, float]:
    """Numbers under a key in the answer's JSON objects (at any depth), by key without case; a
    string holding a number counts ("1,234.50")."""
    named: dict[str, float] = {}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, bool):
                    continue
                if isinstance(item, int | float):
                    named.setdefault(str(key).casefold(), float(item))
                elif isinstance(item, str) and (parsed := number(item.rstrip("%"))) is not None:
                    named.setdefault(str(key).casefold(), parsed)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for _start, _end, value in json_objects(answer):
        walk(value)
    return named


def _after_label(answer: str, label: str) -> float | None:
    """The first number within `LABEL_GAP` characters after `label` (without case)."""
    for found in re.finditer(re.escape(label), answer, flags=re.IGNORECASE):
        window = answer[found.end() : found.end() + LABEL_GAP]
        first = NUMBER.search(window)
        if first is not None:
            return number(first.group())
    return None


def json_objects(text: str) -> list[tuple[int, int, Any]]:
    """The JSON objects written in `text` (fenced or not), outermost only: (start, end, value).
    Bounded: an answer of braces that never close costs a decode from each brace, so only the
    first `MAX_STARTS` are tried, in the first `MAX_SCANNED` characters."""
    decoder = json.JSONDecoder()
    found, at, tries = [], 0, 0
    text = text[:MAX_SCANNED]
    while (start := text.find("{", at)) != -1 and tries < MAX_STARTS:
        tries += 1
        try:
            value, end = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):  # not JSON, or nested past any use
            at = start + 1
            continue
        found.append((start, end, value))
        at = end
    return found


# --- Citations ----------------------------------------------------------------------------------

MIN_QUOTE = 12  # characters: a shorter quote is found on any page and proves nothing

# A cited source's text, fetched again: None when it is not one of the task's sources.
Source = Callable[[str], "str | None"]


def citations_of(answer: str) -> list[dict[str, str]]:
    """The cited passages: every JSON object in the answer with a `quote` and a `url` or `path`."""
    cited: list[dict[str, str]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            where = value.get("url") or value.get("path")
            if isinstance(value.get("quote"), str) and isinstance(where, str):
                if not value.get("url"):  # ./docs/a.md and /docs/a.md are docs/a.md
                    where = posixpath.normpath(where).lstrip("/")
                cited.append({"quote": value["quote"], "source": where})
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for _start, _end, value in json_objects(answer):
        walk(value)
    return cited


def prose(answer: str) -> str:
    """The answer without its JSON objects: what it says, not what it quotes."""
    parts, at = [], 0
    for start, end, _value in json_objects(answer):
        parts.append(answer[at:start])
        at = end
    return " ".join([*parts, answer[at:]])


def check_citations(
    answer: str | None,
    *,
    expected: list[str],
    sources: list[str],
    fetch: Source,
    minimum: int = 1,
) -> Verdict:
    """Whether `answer` states one of `expected` and backs it with at least `minimum` quotes,
    each found again in its source (`fetch`), one of them from `sources` stating it too."""
    if not answer or not answer.strip():
        return Verdict(False, "the mission gave no answer")
    stated = check_answer(prose(answer), expected)
    if not stated.passed:
        return stated
    cited = citations_of(answer)
    if len(cited) < minimum:
        return Verdict(False, f"{len(cited)} passage(s) cited; at least {minimum} expected")
    texts: dict[str, str | None] = {}
    for citation in cited:
        where, quote = citation["source"], _normal(citation["quote"])
        if where not in texts:
            texts[where] = fetch(where)
        text = texts[where]
        if text is None:
            return Verdict(False, f"{where} is not a source of this task")
        if len(quote) < MIN_QUOTE:
            return Verdict(False, f"a quote of {where} is under {MIN_QUOTE} characters")
        if quote not in _normal(text):
            return Verdict(False, f"not found in {where}: {citation['quote'][:200]!r}")
    backing = [
        citation
        for citation in cited
        if citation["source"] in sources and check_answer(citation["quote"], expected).passed
    ]
    if not backing:  # true quotes beside the point back nothing
        return Verdict(False, f"no passage cited from {', '.join(sources)} states {expected[0]!r}")
    return Verdict(True, f"{stated.detail}; {len(cited)} passage(s) found again in their source")


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()
