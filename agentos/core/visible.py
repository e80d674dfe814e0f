"""Text an agent wrote, shown so that nothing in it can hide, reorder or fake a line.

Every character that a browser would not draw as itself is shown as a marker instead: a line
break other than the one the text is split on (`\\r`, form feed, NEL, U+2028...), a control
character, a bidi control (U+202E reorders what follows), an invisible one (zero-width
space, BOM, soft hyphen, a space that is not U+0020). C0 controls and DEL read as their
Unicode control picture (`␍`), anything else as `<U+202E>`; each inside a styled span, so that
the same picture typed by the agent reads differently. One scheme for every page: diffs,
commit messages, file names, the exact call (the `visible` template filter).
"""

from __future__ import annotations

import re
import unicodedata

from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

# Controls, format characters (bidi, zero-width, BOM, soft hyphen, tags), surrogates, private
# use, unassigned code points, line and paragraph separators, and spaces other than U+0020.
HIDING_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
# Drawn as nothing though their category says they are letters or marks: Hangul fillers, the
# combining grapheme joiner, Khmer inherent vowels, the blank Braille pattern, variation
# selectors (which can carry data unseen).
INVISIBLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0"
    + "".join(chr(code) for code in range(0xFE00, 0xFE10))
    + "".join(chr(code) for code in range(0xE0100, 0xE01F0))
)
# A cheap first pass: printable ASCII and the space never hide.
_SUSPECT = re.compile(r"[^\x20-\x7e]")


def hides(char: str) -> bool:
    """True for a character a browser would not show as itself."""
    return char in INVISIBLE or (char != " " and unicodedata.category(char) in HIDING_CATEGORIES)


def has_hidden(text: str, *, keep: str = "") -> bool:
    """True when `text` holds a character `html` would mark (one of `keep` aside)."""
    return any(hides(m.group()) for m in _SUSPECT.finditer(text) if m.group() not in keep)


def marker(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # ␀..␟
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


def text(value: str, *, keep: str = "\t") -> str:
    """`value` with each hiding character (but those in `keep`) replaced by its marker."""
    return _SUSPECT.sub(
        lambda found: (
            found.group()
            if found.group() in keep or not hides(found.group())
            else marker(found.group())
        ),
        value,
    )


def html(text: str, *, keep: str = "\t") -> SafeString:
    """`text` escaped for HTML, each hiding character (but those in `keep`) as a marker span."""
    parts: list[str] = []
    start = 0
    for found in _SUSPECT.finditer(text):
        char = found.group()
        if char in keep or not hides(char):
            continue
        parts.append(conditional_escape(text[start : found.start()]))
        parts.append(
            format_html(
                '<span class="hidden-char" title="U+{}">{}</span>', f"{ord(char):04X}", marker(char)
            )
        )
        start = found.end()
    parts.append(conditional_escape(text[start:]))
    return mark_safe("".join(parts))  # noqa: S308  # each part escaped above
