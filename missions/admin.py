from __future__ import annotations

from django.contrib import admin

from missions.models import Mission, ModelInfo, ModelPrice, Project, RoleRoute


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "repository", "created_at"]
    # Set on the project's page or through the API (`missions.environments`): saving the setup
    # commands pins the commit they run on, which an edit here would skip.
    readonly_fields = ["environment_setup"]


@admin.register(Mission)
class MissionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["goal", "project", "risk_class", "created_at", "max_usd_micros"]
    # The owner edits goals and caps; what was spent is read from the runs' ledger.
    readonly_fields = ["spent"]

    @admin.display(description="spent")
    def spent(self, mission: Mission) -> str:
        return ", ".join(f"{name} {value}" for name, value in mission.spent().items())


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
