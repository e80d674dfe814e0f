"""A diff as git wrote it, read for the owner: every screen that shows one (an approval, the
run timeline, a memory proposal) reads it here and renders it with `console/diff.html`.

The lines are git's: split on `\\n` only, never where Python's `splitlines()` also breaks (a
`\\r`, a form feed, U+2028...). Such a character inside an added line would otherwise show
that line as a harmless addition followed by a deleted-looking line, or as the header of a
file the commit never touched; here it stays in its line and is shown as a marker
(`agentos.core.visible`). Inside a hunk the counts of its `@@` header say which lines are content,
so a content line never reads as a header whatever it starts with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentos.core import visible

MAX_DIFF_LINES = 4000
HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
HEADER = "diff --git "
# Lines git writes between a file's `diff --git` line and its first hunk, styled as the header.
FILE_LINES = ("+++", "---", "index ")
# Git's C-style quoting of a path (`core.quotePath`): these escapes, else three octal digits.
OCTAL = re.compile(r"[0-7]{3}")
UNQUOTED = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


@dataclass(frozen=True)
class DiffLine:
    css: str
    text: str
    # A `diff --git` line where git opens a file (not inside a hunk), and the path it names,
    # git's quoting undone.
    header: bool = False
    path: str = ""

    @property
    def flagged(self) -> bool:
        """A header naming a path that hides characters."""
        return visible.has_hidden(self.path)


def diff_lines(diff: str) -> tuple[list[DiffLine], int]:
    """A unified diff's lines with the class that styles each; and how many were left out."""
    lines = diff.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line opens no line of its own
    shown: list[DiffLine] = []
    old = new = 0  # lines the current hunk still holds, by its header
    for line in lines[:MAX_DIFF_LINES]:
        if old > 0 or new > 0:
            kind = line[:1]
            if kind in (" ", "-", "+", "\\"):
                old -= kind in (" ", "-")
                new -= kind in (" ", "+")
                css = {"-": "diff-del", "+": "diff-add"}.get(kind, "diff-context")
                shown.append(DiffLine(css, line))
                continue
            old = new = 0  # a hunk cut short (a diff not from git): read it as a header
        shown.append(_outside_hunk(line))
        if hunk := HUNK.match(line):
            old, new = (int(count) if count is not None else 1 for count in hunk.groups())
    return shown, max(0, len(lines) - MAX_DIFF_LINES)


def _outside_hunk(line: str) -> DiffLine:
    if line.startswith(HEADER):
        return DiffLine("diff-file", line, header=True, path=header_path(line))
    if line.startswith(FILE_LINES):
        return DiffLine("diff-file", line)
    if line.startswith("@@"):
        return DiffLine("diff-hunk", line)
    # A diff without hunk headers (a hand-made one): styled by its first character.
    return DiffLine({"+": "diff-add", "-": "diff-del"}.get(line[:1], "diff-context"), line)


def header_path(line: str) -> str:
    """The new path a `diff --git a/X b/Y` line names; git quotes a path that holds a control,
    a quote, a backslash or (by default) a non-ASCII character: `"b/\\342\\200\\256x"`."""
    rest = line.removeprefix(HEADER)
    if rest.startswith('"'):
        _, end = _unquote(rest)
        rest = rest[end + 2 :]  # after the quoted old path and the space
    elif rest.endswith('"') and ' "b/' in rest:
        rest = rest[rest.rindex(' "b/') + 1 :]
    else:
        # Unquoted on both sides: the same path twice, unless the file was renamed.
        half = (len(rest) - 5) // 2
        if rest.startswith("a/") and rest == f"a/{rest[2 : 2 + half]} b/{rest[2 : 2 + half]}":
            return rest[2 : 2 + half]
        return rest.partition(" b/")[2] or rest
    if rest.startswith('"'):
        rest, _ = _unquote(rest)
    return rest.removeprefix("b/")


def _unquote(text: str) -> tuple[str, int]:
    """The value of the C-quoted string `text` starts with, and the index of its closing quote."""
    out = bytearray()
    index = 1
    while index < len(text) and text[index] != '"':
        char = text[index]
        if char != "\\":
            out += char.encode()
            index += 1
        elif OCTAL.fullmatch(text[index + 1 : index + 4]):
            out.append(int(text[index + 1 : index + 4], 8) & 0xFF)
            index += 4
        else:
            out.append(UNQUOTED.get(text[index + 1 : index + 2], ord("\\")))
            index += 2
    return out.decode(errors="replace"), index


@dataclass
class DiffFile:
    """One file of a diff, folded on its own: its lines, and what it changes."""

    path: str
    status: str = ""
    size: int | None = None
    type: str = ""  # file, executable, symlink or submodule, when the preview says
    reason: str = ""  # why its part is not in the diff shown, when the preview says
    added: int = 0
    removed: int = 0
    lines: list[DiffLine] = field(default_factory=list)
    in_diff: bool = True  # False: listed as changed, its part cut from the diff shown

    @property
    def flagged(self) -> bool:
        return visible.has_hidden(self.path)

    @property
    def hiding_lines(self) -> bool:
        """Some line of its diff holds a hiding character (a folded block shows no marker)."""
        return any(visible.has_hidden(line.text, keep="\t") for line in self.lines)


def diff_files(diff: list[DiffLine], files: list[Any], *, complete: bool = True) -> list[DiffFile]:
    """The shown diff cut at each file's header, with the status and size the preview lists
    for that path; listed paths the (truncated) diff does not reach come last, without lines.

    A block opens only where git opened a file and, when the preview lists the changed files
    (all of them: `complete`), for a listed path: nothing in a diff names a file of its own."""
    listed = {str(f.get("path")): f for f in files if isinstance(f, dict)}
    found: list[DiffFile] = []
    for line in diff:
        path = _listed_path(line, listed)
        opens = line.header and (not listed or not complete or path in listed)
        if opens or not found:
            found.append(DiffFile(path=path or line.text.removeprefix(HEADER)))
        current = found[-1]
        current.lines.append(line)
        if line.css == "diff-add":
            current.added += 1
        elif line.css == "diff-del":
            current.removed += 1
    seen = {block.path for block in found}
    found += [DiffFile(path=path, in_diff=False) for path in listed if path not in seen]
    for block in found:
        meta = listed.get(block.path) or {}
        block.status = str(meta.get("status") or "")
        size = meta.get("size")
        block.size = size if isinstance(size, int) else None
        block.type = str(meta.get("type") or "")
        block.reason = str(meta.get("reason") or "") if meta.get("shown") is False else ""
    return found


def _listed_path(line: DiffLine, listed: dict[str, Any]) -> str:
    """The path a header names, or the listed path it ends with (a renamed file whose
    unquoted name holds " b/" reads two ways)."""
    if not line.header or line.path in listed:
        return line.path
    return next((p for p in listed if line.text.endswith(f" b/{p}")), line.path)
