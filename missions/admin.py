from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from missions.models import EvalOutcome, Mission, ModelInfo, ModelPrice, Profile, Project, RoleRoute


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


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Read here only: edited on Agents & policies or PUT /api/v1/profiles/{name}
    (`missions.profiles.save`), whose checks and security-log entry an edit here would skip."""

    list_display = ["name", "sandbox_level", "max_usd_micros", "updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Profile | None = None) -> bool:
        return False


@admin.register(EvalOutcome)
class EvalOutcomeAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["recorded_at", "profile_name", "suite", "task", "passed", "usd_micros"]
    list_filter = ["profile_name", "suite", "passed"]
