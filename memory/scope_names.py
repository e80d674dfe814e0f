"""Memory scopes as the owner knows them: `project/12` is the project's name on every screen.
The apps that own what a scope is named after (projects: the missions app) add a namer from
their `ready()`; a scope no namer knows keeps its own name."""

from __future__ import annotations

from collections.abc import Callable

from django.utils.translation import gettext as _

from agentos.core.registries import Registry

# A namer answers for the scopes it knows (their readable names, by scope), None for the others;
# asked with every scope of a page at once, so that a list costs one query.
Namer = Callable[[list[str]], dict[str, str]]
NAMERS: Registry[Namer] = Registry("memory scope namer")


def labels(names: list[str]) -> dict[str, str]:
    """Each scope's readable name."""
    found = {"global": _("Global memory"), "skills": _("Skills")}
    for namer in NAMERS.values():
        found.update(namer([name for name in names if name not in found]))
    return {name: found.get(name, name) for name in names}


def label(name: str) -> str:
    return labels([name])[name]
