"""Console routes of the Memory screen, mounted in the `console` namespace by `agentos.urls`
(before its catch-all for unbuilt screens).

A scope's name has slashes (project/12, agent/executor): `path` takes it whole, and the views
check it (`memory.notes.check_scope`); a note is named by its path in the scope's repository
(notes/YYYY-MM/<id>.md), so its page is /memory/<scope>/notes/YYYY-MM/<id>.md.
"""

from __future__ import annotations

from django.urls import URLPattern, path, register_converter

from memory import views


class NotePath:
    """notes/<month>/<file>: exactly two parts after `notes/`, so the scope before it (any
    number of parts) is never ambiguous. Its form is checked by the view (`overview.note`)."""

    regex = r"notes/[^/]+/[^/]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(NotePath, "memory_note")

urlpatterns: list[URLPattern] = [
    path("memory/", views.memory_index, name="memory"),
    path(
        "memory/<path:scope>/<memory_note:path>/verify",
        views.memory_note_verify,
        name="memory-note-verify",
    ),
    path("memory/<path:scope>/<memory_note:path>", views.memory_note, name="memory-note"),
    path("memory/<path:scope>/", views.memory_scope, name="memory-scope"),
]
