"""Console routes of missions, runs, artifacts and costs, mounted in the `console` namespace by
`agentos.urls` (before its catch-all for unbuilt screens)."""

from __future__ import annotations

from django.urls import URLPattern, path, re_path

from missions import (
    project_settings_views,
    project_views,
    run_views,
    schedule_views,
    trace,
    views,
    web_views,
    webhook_receiver,
    webhook_views,
)

urlpatterns: list[URLPattern] = [
    path("missions/", views.mission_list, name="missions"),
    path("missions/new/", views.mission_new, name="mission-new"),
    path("missions/<int:mission_id>/", views.mission_detail, name="mission"),
    path("runs/<int:run_id>/", run_views.run_detail, name="run"),
    path("runs/<int:run_id>/message/", run_views.run_message, name="run-message"),
    path("runs/<int:run_id>/pause/", run_views.run_pause, name="run-pause"),
    path("runs/<int:run_id>/resume/", run_views.run_resume, name="run-resume"),
    path("runs/<int:run_id>/stop/", run_views.run_stop, name="run-stop"),
    path("runs/<int:run_id>/retry/", run_views.run_retry, name="run-retry"),
    path("runs/<int:run_id>/fork/", run_views.run_fork, name="run-fork"),
    path("runs/<int:run_id>/restart/", run_views.run_restart, name="run-restart"),
    path("runs/<int:run_id>/trace/", trace.run_trace, name="run-trace"),
    re_path(r"^artifacts/(?P<sha256>[0-9a-f]{64})$", views.artifact, name="artifact"),
    path("costs/", views.cost_report, name="costs"),
    path("settings/web-search/", web_views.web_search_settings, name="web-search-settings"),
    path("schedules/", schedule_views.schedule_list, name="schedules"),
    path("schedules/new/", schedule_views.schedule_new, name="schedule-new"),
    path("schedules/preview/", schedule_views.schedule_preview, name="schedule-preview"),
    path("schedules/<int:schedule_id>/", schedule_views.schedule_history, name="schedule"),
    path("schedules/<int:schedule_id>/edit/", schedule_views.schedule_edit, name="schedule-edit"),
    path(
        "schedules/<int:schedule_id>/enabled/",
        schedule_views.schedule_toggle,
        name="schedule-toggle",
    ),
    path(
        "schedules/<int:schedule_id>/delete/",
        schedule_views.schedule_delete,
        name="schedule-delete",
    ),
    path("projects/", project_views.project_list, name="projects"),
    path("projects/<int:project_id>/", project_views.project_detail, name="project"),
    path(
        "projects/<int:project_id>/refresh/",
        project_views.project_refresh,
        name="project-refresh",
    ),
    path("projects/<int:project_id>/pull/", project_views.project_pull, name="project-pull"),
    path(
        "projects/<int:project_id>/settings/",
        project_settings_views.project_settings_save,
        name="project-settings",
    ),
    path(
        "projects/<int:project_id>/instructions/import/",
        project_settings_views.project_instructions_import,
        name="project-instructions-import",
    ),
    path(
        "projects/<int:project_id>/environment/",
        project_views.project_environment,
        name="project-environment",
    ),
    path(
        "projects/<int:project_id>/environment/rebuild/",
        project_views.project_environment_rebuild,
        name="project-environment-rebuild",
    ),
    path(
        "projects/<int:project_id>/credential/",
        project_views.project_credential,
        name="project-credential",
    ),
    # Deliveries from outside: the signature authenticates them, not the owner's session.
    path("hooks/<str:key>", webhook_receiver.receive, name="webhook-receive"),
    path("webhooks/", webhook_views.webhooks_screen, name="webhooks"),
    path("webhooks/<int:webhook_id>/", webhook_views.webhook_detail, name="webhook"),
    path("webhooks/<int:webhook_id>/delete", webhook_views.webhook_delete, name="webhook-delete"),
    path(
        "webhooks/<int:webhook_id>/deliveries/<int:delivery_pk>/replay",
        webhook_views.webhook_replay,
        name="webhook-replay",
    ),
]
