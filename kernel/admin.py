from __future__ import annotations

from django.contrib import admin

from agentos.admin import ReadOnlyAdmin
from kernel.models import WorkerBeat


@admin.register(WorkerBeat)
class WorkerBeatAdmin(ReadOnlyAdmin):
    list_display = ["worker", "started_at", "beat_at", "beats"]
