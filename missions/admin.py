from __future__ import annotations

from django.contrib import admin

from missions.models import Mission, Project


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "created_at"]


@admin.register(Mission)
class MissionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["goal", "project", "created_at", "spent_usd_micros", "max_usd_micros"]
    # The owner edits goals and caps; totals belong to the kernel's ledger.
    readonly_fields = ["spent_tokens", "spent_usd_micros", "spent_turns", "spent_tool_calls"]
