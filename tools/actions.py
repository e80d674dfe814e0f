"""The owner's permission rules, added and removed: one function per change, each its own
transaction with its security-log event (rules decide what agents may do without asking), called
alike by the Tools screen (`agentos.tools_screen`) and an "always allow" approval
(`approvals.service`)."""

from __future__ import annotations

from django.db import transaction

from agentos.core import audit
from agentos.core.models import AuditEvent
from tools.models import PermissionRule


def _record(kind: AuditEvent.Kind, rule: PermissionRule, actor: audit.Actor) -> None:
    audit.record_by(
        kind,
        actor,
        rule=rule.pk,
        project=rule.project_id,
        tool=rule.tool,
        pattern=rule.pattern,
        decision=rule.decision,
    )


def add_permission_rule(*, rule: PermissionRule, actor: audit.Actor) -> PermissionRule:
    """Save a new rule, unsaved, as a form or an approval built it."""
    with transaction.atomic():
        rule.save()
        _record(AuditEvent.Kind.RULE_ADDED, rule, actor)
    return rule


def remove_permission_rule(*, rule: PermissionRule, actor: audit.Actor) -> None:
    with transaction.atomic():
        _record(AuditEvent.Kind.RULE_REMOVED, rule, actor)
        rule.delete()
