from __future__ import annotations

from django.contrib import admin

from agentos.core.admin import ReadOnlyAdmin
from cluster.models import Node, Placement


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "address",
        "port",
        "enabled",
        "status",
        "runner_version",
        "levels",
        "telemetry_at",
        "lost_at",
    ]
    list_filter = ["status", "enabled"]
    search_fields = ["name", "address"]


@admin.register(Placement)
class PlacementAdmin(ReadOnlyAdmin):
    list_display = [
        "step_id",
        "fence",
        "node",
        "status",
        "runner_version",
        "environment",
        "replayed",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "node"]
    search_fields = ["step_id", "key"]
