"""`{{ text|visible }}`: agent-written text with every hiding character shown as a marker
(`agentos.core.visible`), escaped; `|visible:"lines"` keeps its line breaks (a commit message),
`|visible:"name"` marks a tab too (a file name); `|visible_text` gives the markers as plain text,
for where markup cannot go (a page's `<title>`).
`{% hidden_flag path %}`: a warning label after a name that hides characters."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from agentos.core import visible as markers

register = template.Library()


@register.filter
def visible(value: Any, kind: str = "") -> SafeString:
    keep = {"lines": "\t\n", "name": ""}.get(kind, "\t")
    return markers.html(str(value), keep=keep)


@register.filter
def visible_text(value: Any) -> str:
    """`value` with each hiding character as its marker, as text (escaped as any text)."""
    return markers.text(str(value))


@register.simple_tag
def hidden_flag(text: Any, *, name: bool = True) -> str:
    """Empty, or a label saying that `text` holds characters shown as markers."""
    if not markers.has_hidden(str(text), keep="" if name else "\t\n"):
        return ""
    label = _("hidden characters in this name") if name else _("hidden characters")
    return format_html('<span class="hidden-flag">{}</span>', label)
