"""The kernel in the admin: records are read-only, except the owner's governors.

Editable here: a run's budget caps and the global budget row. Everything else is written by the
kernel's services (journal, scheduler, leases) and only shown.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.forms import ModelForm
from django.http import HttpRequest

from agentos.core import audit
from agentos.core.admin import ReadOnlyAdmin
from kernel import budgets
from kernel.models import (
    Artifact,
    ChaosEffect,
    DailySpend,
    Event,
    GlobalBudget,
    ProviderSpend,
    Run,
    Step,
    Wait,
    WorkerBeat,
)

RUN_CAPS = ("max_tokens", "max_usd_micros", "max_turns", "max_tool_calls", "max_seconds")


# Unparameterised like ReadOnlyAdmin: ModelAdmin[...] fails at runtime without django-stubs-ext.
class StepInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Step
    fields = readonly_fields = ("seq", "kind", "effect", "name", "finished_at", "settled_by")
    extra = 0
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # see StepInline
    list_display = ["id", "program", "status", "account", "depth", "created_at", "finished_at"]
    list_filter = ["status", "program"]
    list_select_related = ["account"]
    search_fields = ["=id"]
    inlines = [StepInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Run | None = None) -> list[str]:
        return [
            field.name
            for field in Run._meta.concrete_fields
            if field.name not in RUN_CAPS and field.name != "id"
        ]

    def save_model(
        self, request: HttpRequest, obj: Run, form: ModelForm[Run], change: bool
    ) -> None:
        # Write the changed caps only: a full-row save would put back the status, lease and
        # ledger as this request read them, undoing whatever a worker committed meanwhile.
        changed = [name for name in form.changed_data if name in RUN_CAPS]
        if changed:
            obj.save(update_fields=changed)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ["run", "seq", "kind", "effect", "name", "started_at", "finished_at"]
    list_filter = ["kind", "effect"]
    list_select_related = ["run"]
    search_fields = ["=id", "=run__id"]


@admin.register(Wait)
class WaitAdmin(ReadOnlyAdmin):
    list_display = ["run", "seq", "kind", "state", "due_at", "created_at", "settled_at"]
    list_filter = ["kind", "state"]
    list_select_related = ["run"]
    search_fields = ["=id", "=run__id"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["id", "at", "kind", "trust", "run", "seq"]
    # No filter on `kind` (free text): its choices would be a DISTINCT over the whole log.
    list_filter = ["trust"]
    list_select_related = ["run"]
    search_fields = ["=id", "=run__id"]
    ordering = ["-id"]
    show_full_result_count = False  # spares a second count(*) over every partition


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ["name", "sha256", "size", "media_type", "run", "created_at"]
    list_filter = ["media_type"]
    list_select_related = ["run"]
    search_fields = ["=id", "=sha256", "name"]


@admin.register(ChaosEffect)
class ChaosEffectAdmin(ReadOnlyAdmin):
    list_display = ["key", "run_id_value", "seq", "effect", "applied_at"]
    list_filter = ["effect"]
    search_fields = ["=id", "=key", "=run_id_value"]


@admin.register(DailySpend)
class DailySpendAdmin(ReadOnlyAdmin):
    list_display = ["day", "usd_micros", "tokens"]
    ordering = ["-day"]


@admin.register(ProviderSpend)
class ProviderSpendAdmin(ReadOnlyAdmin):
    list_display = ["day", "provider", "usd_micros"]
    list_filter = ["provider"]
    ordering = ["-day", "provider"]


@admin.register(WorkerBeat)
class WorkerBeatAdmin(ReadOnlyAdmin):
    list_display = ["worker", "started_at", "beat_at", "beats"]


@admin.register(GlobalBudget)
class GlobalBudgetAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # see StepInline
    list_display = ["__str__", "daily_usd_micros", "max_running_runs", "mission_usd_micros"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A singleton: the kernel reads the one row, a second would be ignored.
        return super().has_add_permission(request) and not GlobalBudget.objects.exists()

    def save_model(self, request: HttpRequest, obj: GlobalBudget, form: Any, change: bool) -> None:
        # The caps change as from the Agents screen and the API: checked, and in the security log.
        # A daily cap of 0 reads as "no cap" (kernel.metering), which the kernel spells null.
        caps = {name: getattr(obj, name) for name in budgets.GLOBAL_CAPS}
        caps["daily_usd_micros"] = obj.daily_usd_micros or None
        budgets.set_global_caps(caps, actor=audit.Actor.of(request))
        obj.pk = GlobalBudget.objects.order_by("pk").values_list("pk", flat=True).first()
