"""Domain profiles and the outcomes of their evaluation suites (re-exported by `missions.models`).

A profile (research, programming, analysis, automation, or the owner's own) is what a kind of
mission starts with: per-role routes, the tools, MCP servers and skills its agents are given, a
sandbox level, criteria templates and caps. It is chosen when a mission starts and applied by
`missions.profiles.apply` (docs/design.md §5); the owner edits it on Agents & policies.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Profile(models.Model):
    """One domain profile. Its lists are checked by `missions.profiles.validate` before any
    write (the console, the API and the admin's form go through it)."""

    name = models.SlugField(_("name"), max_length=40, unique=True)
    description = models.TextField(_("description"), blank=True)
    # Per-role routes: {"executor": {"provider": ..., "model": ...[, "effort": ...]}} or only
    # {"effort": ...}, the role's default model at that effort (resolved at launch). A route
    # the mission names wins.
    routes = models.JSONField(_("routes"), default=dict, blank=True)
    # The built-in tools its agents may be given (empty: every tool its sandbox level allows);
    # MCP servers added to the mission's; the skills offered (empty: every skill found).
    tools = models.JSONField(_("tools"), default=list, blank=True)
    mcp_servers = models.JSONField(_("MCP servers"), default=list, blank=True)
    skills = models.JSONField(_("skills"), default=list, blank=True)
    # The least sandbox level of its missions (`tools.levels`): a mission's risk class may
    # raise it, never lower it.
    sandbox_level = models.PositiveSmallIntegerField(_("sandbox level"), default=1)
    # Lines in the console's checks format (`verification.from_lines`: "$ command" or a
    # statement an evaluator checks), the mission's criteria when it gives none.
    criteria = models.JSONField(_("criteria templates"), default=list, blank=True)
    # A mission's caps when it names none (else the owner's defaults); null: none from here.
    max_tokens = models.PositiveBigIntegerField(_("token cap"), null=True, blank=True)
    max_usd_micros = models.PositiveBigIntegerField(_("spend cap (µ$)"), null=True, blank=True)
    max_seconds = models.PositiveIntegerField(_("wall-time cap (s)"), null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class EvalOutcome(models.Model):
    """One task of an evaluation suite as `mission_eval` judged it: completion (the oracle's
    verdict) and cost per profile over time are read from these rows (`missions.costs`)."""

    profile = models.ForeignKey(
        Profile, null=True, blank=True, on_delete=models.SET_NULL, related_name="eval_outcomes"
    )
    # The profile's name when it ran: kept when the profile is deleted.
    profile_name = models.CharField(max_length=40, blank=True)
    suite = models.CharField(max_length=100)
    task = models.CharField(max_length=48)
    mode = models.CharField(max_length=10)
    mission = models.ForeignKey(
        "missions.Mission", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=30)
    passed = models.BooleanField()
    detail = models.TextField(blank=True)
    tokens = models.PositiveBigIntegerField(default=0)
    usd_micros = models.PositiveBigIntegerField(default=0)
    seconds = models.FloatField(default=0.0)
    model = models.CharField(max_length=100, blank=True)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-recorded_at", "-id"]
        indexes = [models.Index(fields=["profile_name", "recorded_at"], name="eval_by_profile")]

    def __str__(self) -> str:
        verdict = "pass" if self.passed else "fail"
        return f"{self.profile_name or '-'} {self.suite}/{self.task}: {verdict}"
