"""Projects and missions: what the owner asks for. Runs (in `kernel`) do the work."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Project(models.Model):
    name = models.CharField(_("name"), max_length=120, unique=True)
    description = models.TextField(_("description"), blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Mission(models.Model):
    """An owner goal with its definition of done and its budget (editable in the admin)."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="missions")
    goal = models.TextField(_("goal"))
    definition_of_done = models.TextField(_("definition of done"), blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Caps over every run of the mission; null means no cap.
    max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    max_usd_micros = models.PositiveBigIntegerField(
        _("max spend (micro-dollars)"), null=True, blank=True
    )
    max_turns = models.PositiveIntegerField(null=True, blank=True)
    max_tool_calls = models.PositiveIntegerField(null=True, blank=True)
    max_concurrent_runs = models.PositiveSmallIntegerField(default=12)
    # Totals, debited by the kernel's journal when a step with a cost completes.
    spent_tokens = models.PositiveBigIntegerField(default=0)
    spent_usd_micros = models.PositiveBigIntegerField(default=0)
    spent_turns = models.PositiveIntegerField(default=0)
    spent_tool_calls = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.goal[:60]
