"""Console pages of one run: its live timeline, and the owner's steering (a message, pause and
resume, stop, fork from a step).

Each steering form calls one service (`missions.steering`, `kernel.runs`) and redirects back
with what happened; a refusal (a finished run, a step without a result...) renders the page
again with the service's own message and status.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST, require_safe

from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from kernel import programs, runs, versions
from kernel.exceptions import KernelError
from kernel.models import TERMINAL, Run, Step, StepKind, Wait, WaitKind
from missions import forks, overview, steering, timeline
from missions.engine import outage
from missions.errors import MissionError
from missions.forms import ForkForm, MessageForm
from tools import retention


def _run(run_id: int) -> Run:
    return get_object_or_404(
        Run.objects.select_related("account__mission__project", "parent"), pk=run_id
    )


def _page(
    request: HttpRequest,
    run: Run,
    *,
    status: int = 200,
    error: str | None = None,
    form: MessageForm | None = None,
    confirm_stop: bool = False,
    confirm_fork: int | None = None,
) -> HttpResponse:
    context = {
        **_live(run),
        "screen": SCREENS_BY_SLUG["missions"],
        "error": error,
        "form": form or MessageForm(),
        "confirm_stop": confirm_stop and not run.is_terminal,
        "stoppable": _unfinished_below(run) if confirm_stop else 0,
        # Only a recorded step can be forked from: anything else asks nothing.
        "confirm_fork": confirm_fork
        if confirm_fork is not None
        and not forks.worktree_gone(run)
        and Step.objects.filter(run=run, seq=confirm_fork, finished_at__isnull=False).exists()
        else None,
    }
    return render(request, "missions/run.html", context, status=status)


def _live(run: Run) -> dict[str, Any]:
    """What the live part of the page re-reads: the run's state, messages and timeline."""
    contract = run.contract if isinstance(run.contract, dict) else {}
    forked = contract.get("forked_from")
    output = run.output if isinstance(run.output, dict) else {}
    answer = output.get("answer")
    return {
        "run": run,
        "state": overview.state_of(run),
        "waiting_on": outage.waiting_on(run),
        "role": overview.role_of(run),
        "model": overview.model_of(run),
        "tokens": overview.tokens_of(run),
        "cache_share": overview.cache_share_of(run),
        "trigger": str(contract.get("trigger") or ""),
        "forked_from": forked if isinstance(forked, dict) else None,
        "worktree": retention.keeping(run)
        if isinstance(run.input, dict) and run.input.get("repository")
        else None,
        "stand_in": contract.get("scripted_stand_in") is True,
        # No fork link on a run whose files are gone: the fork would fail (`missions.forks`).
        "fork_gone": forks.worktree_gone(run),
        "answer": answer if isinstance(answer, str) else None,
        "output": None
        if isinstance(answer, str) or run.output is None
        else json.dumps(run.output, indent=2, ensure_ascii=False, sort_keys=True),
        "children": list(run.children.order_by("created_at", "id")),
        "engine_version": programs.ENGINE_VERSION,
        "restart_seq": versions.last_recorded_seq(run.pk) if run.needs_migration else 0,
        "messages_sent": timeline.messages(run),
        "timeline": timeline.timeline(run),
        "collected_at": timezone.now(),
    }


def live_steps(wanted: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """`(run, seq, html)` of each step in `wanted` that exists, as the run page's timeline shows
    it now: what the event stream pushes to the pages watching those runs, to be swapped in
    without a request (`agentos.websocket`). Two queries whatever the count, three when one of
    them asks the owner."""
    if not wanted:
        return []
    run_ids = {run_id for run_id, _seq in wanted}
    found = Run.objects.in_bulk(run_ids)
    steps = {
        (step.run_id, step.seq): step
        for step in Step.objects.filter(run_id__in=run_ids, seq__in={seq for _r, seq in wanted})
    }
    asking = [step for step in steps.values() if step.kind == StepKind.WAIT_HUMAN]
    waits = {
        (wait.run_id, wait.seq): wait
        for wait in (
            Wait.objects.filter(
                run_id__in={step.run_id for step in asking},
                kind=WaitKind.HUMAN,
                seq__in={step.seq for step in asking},
            )
            if asking
            else ()
        )
    }
    shown: list[tuple[int, int, str]] = []
    for key in wanted:
        step = steps.get(key)
        run = found.get(key[0])
        if step is None or run is None:
            continue
        entry = timeline.entry(step, waits.get(key))
        entry.abandoned = not entry.finished and run.is_terminal
        html = render_to_string(
            "missions/step.html", {"e": entry, "run": run, "fork_gone": forks.worktree_gone(run)}
        )
        shown.append((key[0], key[1], html))
    return shown


def _unfinished_below(run: Run) -> int:
    return Run.objects.filter(ancestors__contains=[run.pk]).exclude(status__in=TERMINAL).count()


def _back(run: Run, anchor: str = "") -> HttpResponse:
    return redirect(reverse("console:run", args=[run.pk]) + anchor)


@require_safe
@owner_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(run_id)
    if request.htmx and request.htmx.target == "timeline":  # type: ignore[attr-defined]
        # The timeline, with the status card swapped out of band: one request for both.
        return render(request, "missions/run_live.html", _live(run))
    fork = request.GET.get("fork", "")
    return _page(
        request,
        run,
        confirm_stop=request.GET.get("confirm") == "stop",
        confirm_fork=int(fork) if fork.isdigit() else None,
    )


@require_POST
@owner_required
def run_message(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(run_id)
    form = MessageForm(request.POST)
    if not form.is_valid():
        return _page(request, run, status=400, form=form)
    try:
        steering.send_message(
            run_id=run.pk,
            text=form.cleaned_data["text"],
            interrupt=form.cleaned_data["interrupt"],
        )
    # The steering's own refusal (empty, too long, an ended run) or the kernel's, interrupting.
    except (MissionError, KernelError) as refused:
        return _page(request, run, status=refused.status, error=refused.message, form=form)
    if form.cleaned_data["interrupt"]:
        messages.success(request, _("Sent. The current step is interrupted; it arrives now."))
    else:
        messages.success(request, _("Sent. The agent reads it before its next model call."))
    return _back(run, "#steer")


@require_POST
@owner_required
def run_pause(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(run_id)
    try:
        runs.pause_run(run.pk)
    except KernelError as refused:
        return _page(request, run, status=refused.status, error=refused.message)
    messages.success(
        request, _("Paused. A step under way finishes first; nothing runs until you resume.")
    )
    return _back(run)


@require_POST
@owner_required
def run_resume(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(run_id)
    try:
        runs.resume_run(run.pk)
    except KernelError as refused:
        return _page(request, run, status=refused.status, error=refused.message)
    messages.success(request, _("Resumed where it stopped."))
    return _back(run)


@require_POST
@owner_required
def run_retry(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(run_id)
    try:
        outage.retry_now(run.pk, by="owner")
    except KernelError as refused:
        return _page(request, run, status=refused.status, error=refused.message)
    messages.success(request, _("The provider is asked again now."))
    return _back(run)


@require_POST
@owner_required
def run_stop(request: HttpRequest, run_id: int) -> HttpResponse:
    """Stop only with `confirm=yes` (the second button): without it, ask first."""
    run = _run(run_id)
    if run.is_terminal:
        error = _("Run %(run)s has ended (%(status)s): there is nothing to stop.") % {
            "run": run.pk,
            "status": run.get_status_display(),
        }
        return _page(request, run, status=409, error=error)
    if request.POST.get("confirm") != "yes":
        return _page(request, run, confirm_stop=True)
    try:
        stopped = runs.request_stop(run.pk, reason="cancelled", by="owner")
    except KernelError as refused:
        return _page(request, run, status=refused.status, error=refused.message)
    messages.success(
        request,
        _("Stop requested for %(count)d run(s); a step under way is interrupted.")
        % {"count": stopped},
    )
    return _back(run)


@require_POST
@owner_required
def run_fork(request: HttpRequest, run_id: int) -> HttpResponse:
    """Fork only with `confirm=yes` (the second button): without it, ask first, so one stray
    tap on a step starts nothing."""
    run = _run(run_id)
    form = ForkForm(request.POST)
    if not form.is_valid():
        return _page(request, run, status=400, error=_("Fork from which step? Choose one."))
    seq = form.cleaned_data["seq"]
    if request.POST.get("confirm") != "yes":
        return _page(request, run, confirm_fork=seq)
    try:
        fork = forks.fork(run.pk, at_seq=seq, by="owner")
    except (MissionError, KernelError) as refused:
        return _page(request, run, status=refused.status, error=refused.message)
    messages.success(
        request,
        _(
            "Run %(fork)s starts from step %(seq)s of run %(run)s: its first steps are the"
            " recorded ones."
        )
        % {"fork": fork.pk, "seq": seq, "run": run.pk},
    )
    return redirect("console:run", run_id=fork.pk)


@require_POST
@owner_required
def run_restart(request: HttpRequest, run_id: int) -> HttpResponse:
    """A run parked as "needs migration": start it again on this engine from its last recorded
    step (a fork), and stop the parked one."""
    run = _run(run_id)
    try:
        fresh = versions.restart(run.pk, by="owner")
    except KernelError as refused:
        return _page(request, run, status=refused.status, error=refused.message)
    messages.success(
        request,
        _("Run %(fresh)s carries on from run %(run)s on this engine; run %(run)s is stopped.")
        % {"fresh": fresh.pk, "run": run.pk},
    )
    return redirect("console:run", run_id=fresh.pk)
