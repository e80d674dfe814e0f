"""Console routes of approvals, mounted in the `console` namespace by `agentos.urls`."""

from __future__ import annotations

from django.urls import URLPattern, path

from approvals import views

urlpatterns: list[URLPattern] = [
    path("approvals/", views.queue, name="approvals"),
    path("approvals/<int:approval_id>/", views.approval, name="approval"),
    path("questions/<int:question_id>/", views.question, name="question"),
    path("reconciliations/<int:reconciliation_id>/", views.reconciliation, name="reconciliation"),
]
