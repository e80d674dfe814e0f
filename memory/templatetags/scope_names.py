"""`{{ name|scope_label }}`: a memory scope as the owner knows it (`memory.scope_names`)."""

from __future__ import annotations

from django import template

from memory import scope_names

register = template.Library()


@register.filter
def scope_label(name: object) -> str:
    return scope_names.label(str(name))
