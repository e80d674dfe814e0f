"""Projects: created by the owner (console or API), validated as the admin validates them."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from missions.errors import MissionError
from missions.models import Project


def create_project(*, name: str, description: str = "", repository: str = "") -> Project:
    """A new project, or `MissionError` (422) naming each invalid field: a name already taken,
    a repository that is not an absolute path to a git repository."""
    project = Project(name=name.strip(), description=description.strip(), repository=repository)
    project.repository = project.repository.strip()
    try:
        project.full_clean()
        with transaction.atomic():
            project.save()
    except ValidationError as error:
        raise _invalid(error.message_dict) from error
    except IntegrityError as error:  # the same name, created between the check and the insert
        raise _invalid({"name": ["A project with this name already exists."]}) from error
    return project


def _invalid(fields: dict[str, list[str]]) -> MissionError:
    return MissionError(
        "The project is not valid: "
        + "; ".join(f"{field}: {' '.join(messages)}" for field, messages in fields.items()),
        code="invalid_input",
        status=422,
        details={"fields": fields},
    )
