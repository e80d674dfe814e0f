"""Kernel state. For now the worker pool's heartbeats; the journal comes with the kernel issue."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class WorkerBeat(models.Model):
    """The last sign of life of one worker process of the huey pool (one row per process)."""

    worker = models.CharField(_("worker"), max_length=200, unique=True)  # "host:pid"
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField(db_index=True)
    beats = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-beat_at"]
        verbose_name = _("worker heartbeat")

    def __str__(self) -> str:
        return f"{self.worker} @ {self.beat_at:%H:%M:%S}"
