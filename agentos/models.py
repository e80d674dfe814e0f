"""The shell's own rows: which mission an A2A task is (`agentos.a2a`)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

from agentos.core.models import ApiToken
from missions.models import Mission


class A2ATask(models.Model):
    """An A2A task id and the mission it became: a row, so a restart loses no task. The token
    that sent it is the only one that may read, answer or cancel it (another caller sees no such
    task); it is kept, not deleted, when the token is revoked."""

    task_id = models.UUIDField(_("task id"), default=uuid.uuid4, unique=True, editable=False)
    context_id = models.CharField(_("context id"), max_length=200)
    mission = models.OneToOneField(Mission, on_delete=models.PROTECT, related_name="a2a_task")
    token = models.ForeignKey(ApiToken, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("A2A task")

    def __str__(self) -> str:
        return f"A2A task {self.task_id} (mission {self.mission_id})"
