"""A project's memory scope (`project/<id>`, `memory.tools`) named after the project; added to
`memory.scope_names.NAMERS` by the missions app's `ready()`."""

from __future__ import annotations

import re

from django.utils.translation import gettext as _

from missions.models import Project

PROJECT_SCOPE = re.compile(r"project/(\d{1,18})")


def projects(names: list[str]) -> dict[str, str]:
    ids = {name: int(found.group(1)) for name in names if (found := PROJECT_SCOPE.fullmatch(name))}
    known = dict(Project.objects.filter(pk__in=ids.values()).values_list("pk", "name"))
    return {
        name: _("Project “%(name)s”") % {"name": known[pk]}
        if pk in known
        else _("Project %(id)s (deleted)") % {"id": pk}
        for name, pk in ids.items()
    }
