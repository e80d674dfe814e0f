from __future__ import annotations

from django.contrib import admin

from missions.models import Mission, ModelInfo, ModelPrice, Project, RoleRoute


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "created_at"]


@admin.register(Mission)
class MissionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["goal", "project", "created_at", "spent_usd_micros", "max_usd_micros"]
    # The owner edits goals and caps; totals belong to the kernel's ledger.
    readonly_fields = ["spent_tokens", "spent_usd_micros", "spent_turns", "spent_tool_calls"]


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = [
        "provider",
        "model",
        "version",
        "valid_from",
        "input_per_mtok",
        "output_per_mtok",
        "cache_read_per_mtok",
        "cache_write_per_mtok",
    ]
    list_filter = ["provider", "version"]


@admin.register(ModelInfo)
class ModelInfoAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["provider", "model", "context_window", "max_output_tokens", "fetched_at"]
    list_filter = ["provider"]


@admin.register(RoleRoute)
class RoleRouteAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["role", "provider", "model", "effort"]
