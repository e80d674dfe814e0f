"""The kill switch: one confirmed tap stops every run, takes every lease back, pauses every
schedule, revokes every sandbox's egress token and kills every sandbox on every node, then says
what it stopped. For when something is going wrong faster than the owner can read it; everything
stopped can be looked at, forked or restarted afterwards.

The database part is one transaction (all of it, or none). What follows it is outside any
transaction and safe to repeat: a process killed in between leaves runs already stopped, whose
sandboxes their workers cancel and whose tokens the egress service refuses (a stopped tree)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods
from ninja import Field, Router, Schema

from agentos.core import audit
from agentos.core.errors import DomainError
from agentos.core.models import AuditEvent
from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from cluster import nodes, run_tokens, transport
from cluster.models import Node
from kernel import runs
from kernel.models import TERMINAL, Run
from missions.models import Schedule
from tools.mcp import sessions as mcp_sessions

STOP_SECONDS = 10  # per node: a node this slow is reported as not answering


@dataclass(frozen=True)
class Stopped:
    runs: list[int]
    leases_revoked: int
    schedules: list[str]
    # Per node: the steps whose sandboxes were killed there, or why the node did not answer.
    sandboxes: dict[str, list[str]] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    tokens_revoked: bool = False


def engage(*, actor: audit.Actor) -> Stopped:
    """Stop everything in one transaction (all of it happens, or none), and log it: the console,
    the API and `manage.py kill_switch` all come here. The journal and the log name the actor in
    one word (`Actor.name`: the account, the token or the command)."""
    by = actor.name
    with transaction.atomic():
        halted = runs.halt_all(by=by)
        paused = list(Schedule.objects.filter(enabled=True).order_by("name"))
        Schedule.objects.filter(pk__in=[schedule.pk for schedule in paused]).update(enabled=False)
        stopped = Stopped(halted.stopped, halted.leases_revoked, [s.name for s in paused])
        detail: dict[str, Any] = {
            "runs": stopped.runs,
            "leases_revoked": stopped.leases_revoked,
            "schedules": [schedule.pk for schedule in paused],
        }
        audit.record_by(AuditEvent.Kind.KILL_SWITCH, replace(actor, username=by), **detail)
    # Every sandbox's token dies with it: nothing still running reaches out, even before its
    # tree's stop is seen (the egress service also refuses a stopped tree within a second).
    run_tokens.revoke_all()
    # This process's MCP servers too (a worker's end with their runs: `missions.engine.loop`).
    mcp_sessions.POOL.close_all()
    sandboxes, unreachable = _stop_sandboxes()
    audit.record(
        AuditEvent.Kind.KILL_SWITCH,
        username=by,
        stage="sandboxes",  # the database part was recorded with it, above
        sandboxes=sandboxes,
        unreachable=unreachable,
        tokens_revoked=True,
    )
    return replace(stopped, sandboxes=sandboxes, unreachable=unreachable, tokens_revoked=True)


def _stop_sandboxes() -> tuple[dict[str, list[str]], dict[str, str]]:
    """`stop_all` on every enabled node: a runner kills every sandbox its node runs, whichever
    of its processes started it. A node that does not answer is reported, not waited for."""
    stopped: dict[str, list[str]] = {}
    unreachable: dict[str, str] = {}
    nodes.local_node()  # the control plane's own node is always asked
    for node in Node.objects.filter(enabled=True).order_by("name"):
        try:
            answer = nodes.call(node, "stop_all", {}, timeout=STOP_SECONDS)
        except (transport.TransportError, transport.RunnerError, nodes.NodeError) as error:
            unreachable[node.name] = str(error)
            continue
        stopped[node.name] = [str(step) for step in answer.get("stopped", [])]
    return stopped, unreachable


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def kill_switch(request: HttpRequest) -> HttpResponse:
    context: dict[str, object] = {"screen": SCREENS_BY_SLUG["settings"]}
    status = 200
    if request.method == "POST":
        if request.POST.get("confirm") == "yes":
            context["stopped"] = engage(actor=audit.Actor.of(request))
        else:
            context["unconfirmed"] = True
            status = 400
    unfinished = Run.objects.exclude(status__in=TERMINAL)
    context["unfinished"] = unfinished.count()
    context["executing"] = unfinished.filter(lease_expires_at__isnull=False).count()
    context["schedules"] = Schedule.objects.filter(enabled=True).count()
    return render(request, "console/kill_switch.html", context, status=status)


# --- the same over /api/v1, for a script that sees something going wrong ------------------------

router = Router(tags=["system"])


class KillSwitchIn(Schema):
    confirm: bool = Field(description="must be true: nothing is stopped without it")


class KillSwitchOut(Schema):
    runs: list[int] = Field(description="the runs asked to stop")
    leases_revoked: int
    schedules: list[str] = Field(description="the schedules paused, by name")
    sandboxes: dict[str, list[str]] = Field(
        description="per node, the steps whose sandboxes were killed there"
    )
    unreachable: dict[str, str] = Field(description="per node that did not answer, why")
    tokens_revoked: bool = Field(description="every sandbox's egress token revoked")


@router.post(
    "/stop-everything",
    response=KillSwitchOut,
    summary="Kill switch: stop every run, take every lease back, pause every schedule, revoke"
    " every egress token, kill every sandbox on every node",
)
def stop_everything(request: HttpRequest, payload: KillSwitchIn) -> Stopped:
    if not payload.confirm:
        raise DomainError(
            "Nothing was stopped: send confirm: true to stop everything.",
            code="confirm_required",
        )
    return engage(actor=audit.Actor.of(request))
