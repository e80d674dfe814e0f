"""`{{ name|scope_label }}`: a memory scope as the owner knows it. A project's scope is named
`project/<id>` (`memory.tools`); the page says the project's name instead. It lives with the
missions app because projects do: the memory app sits below it and cannot name them."""

from __future__ import annotations

import re

from django import template
from django.utils.translation import gettext as _

from missions.models import Project

register = template.Library()

PROJECT_SCOPE = re.compile(r"project/(\d{1,18})")


@register.filter
def scope_label(name: object) -> str:
    text = str(name)
    if text == "global":
        return _("Global memory")
    if text == "skills":
        return _("Skills")
    found = PROJECT_SCOPE.fullmatch(text)
    if found is None:
        return text
    project = Project.objects.filter(pk=int(found.group(1))).values_list("name", flat=True).first()
    if project is None:
        return _("Project %(id)s (deleted)") % {"id": found.group(1)}
    return _("Project “%(name)s”") % {"name": project}
