"""Console routes of approvals, mounted in the `console` namespace by `agentos.urls`."""

from __future__ import annotations

from django.urls import URLPattern, path

from approvals import notice_views, views

urlpatterns: list[URLPattern] = [
    path("approvals/", views.queue, name="approvals"),
    path("approvals/<int:approval_id>/", views.approval, name="approval"),
    path("questions/<int:question_id>/", views.question, name="question"),
    path("reconciliations/<int:reconciliation_id>/", views.reconciliation, name="reconciliation"),
    path("told/<int:notification_id>/dismiss", notice_views.dismiss, name="told-dismiss"),
    path("told/dismiss", notice_views.dismiss_all, name="told-dismiss-all"),
    path("settings/notifications", notice_views.save_settings, name="notification-settings"),
]
