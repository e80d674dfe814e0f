"""A provider's outage is a durable wait, not a failure (docs/design.md §7, §8).

A model step retries a transient failure briefly in place (`model_call`); past that, the step
does not fail: it holds a durable timer (`kernel.waits.hold_step`) and the run suspends, its
worker free, until the timer is due. The step's intent stays without a result, so the claim
that follows replays it and the model is asked again by the same step (a `model_call` step is
safe to run again). Each hold waits longer (doubling, with jitter so many runs held by one
outage do not all come back at once), or as long as the provider's `retry-after` said; past
the owner's horizon (`PROVIDER_OUTAGE_HOURS`) the step fails, saying how long it waited and why.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, fields
from datetime import datetime, timedelta
from typing import Any, NoReturn

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from kernel import journal, scheduler, waits
from kernel.context import StepCall
from kernel.exceptions import KernelError, StepFailed, Suspend
from kernel.models import TERMINAL, Run, RunStatus, Wait, WaitKind, WaitState
from missions.providers.base import ProviderError, Usage
from missions.providers.errors import Trouble, classify

MAX_WAIT_SECONDS = 15 * 60.0  # one hold at most: a recovered provider is noticed soon enough
_RANDOM = secrets.SystemRandom()
# The owner's two answers to a refused key or an unpaid account.
RETRY, STOP = "Retry", "Stop"


def fail_or_wait(
    provider: str, error: ProviderError, call: StepCall, *, lost: Usage | None = None
) -> NoReturn:
    """After the in-step retries: hold the step on a timer if the failure is transient and the
    horizon is not reached (raises `Suspend`), else fail it (raises `StepFailed`). `lost`, what
    the failed attempts cost, is kept with the hold until the step records its answer."""
    trouble = classify(error)
    if trouble.owner_fixes:
        ask_owner(provider, trouble, call)
    if not trouble.transient:
        raise StepFailed(f"{provider}: {error.code}: {error.message}")
    said = trouble.describe(provider)
    now = timezone.now()
    hold = waits.step_hold(call.run_id, call.seq)
    since = hold.created_at if hold is not None else now
    held = hold.question.get("outage") if hold is not None else None
    holds = int(held.get("holds", 0)) if isinstance(held, dict) else 0
    hours = settings.PROVIDER_OUTAGE_HOURS
    horizon = since + timedelta(hours=hours)
    if now >= horizon:
        waits.release_step(call.run_id, call.seq)  # no longer waited on: not an outage now
        raise StepFailed(f"the provider was unavailable for {hours} h: {said}: {error.message}")
    # The last attempt goes at the horizon itself, not past it.
    due = min(now + timedelta(seconds=delay_seconds(holds, trouble.retry_after)), horizon)
    asked = question(provider, trouble, holds + 1, due)
    asked["outage"]["lost_usage"] = asdict(plus(_lost(held), lost))
    waits.hold_step(call.run_id, call.seq, asked, due_at=due)
    raise Suspend(due, reason(said, due))


def delay_seconds(holds: int, retry_after: float | None) -> float:
    """The provider's `retry-after` (never earlier, up to a tenth later), else an exponential
    wait from `PROVIDER_RETRY_SECONDS` with "equal jitter": between half and all of it."""
    if retry_after is not None:
        return min(retry_after * _RANDOM.uniform(1.0, 1.1), MAX_WAIT_SECONDS)
    base = min(settings.PROVIDER_RETRY_SECONDS * 2.0**holds, MAX_WAIT_SECONDS)
    return _RANDOM.uniform(base / 2, base)


def question(provider: str, trouble: Trouble, holds: int, due: datetime) -> dict[str, Any]:
    """What the hold records (and the run's page and API show): who failed, how, until when."""
    return {
        "outage": {
            "provider": provider,
            "kind": trouble.kind,
            "status": trouble.status,
            "said": trouble.describe(provider),
            "message": trouble.message[:500],
            "holds": holds,
            "until": due.isoformat(),
        }
    }


def reason(said: str, due: datetime) -> str:
    return f"{said}; retrying at {timezone.localtime(due):%H:%M:%S}"


def ask_owner(provider: str, trouble: Trouble, call: StepCall) -> NoReturn:
    """A refused key or an unpaid account: the owner fixes it in Settings (a key is read again
    by the next execution), then answers the question; the same step then asks again."""
    said = trouble.describe(provider)
    account_id = Run.objects.values_list("account_id", flat=True).get(pk=call.run_id)
    due = timezone.now() + timedelta(hours=settings.APPROVAL_TTL_HOURS)
    fix = (
        "its key in Settings"
        if trouble.kind == "authentication"
        else "the account's credit or quota"
    )
    asked = {
        "type": "question",
        "text": f"{said}: {trouble.message[:300]}. Fix {fix}, then answer {RETRY!r} to send the"
        f" request again, or {STOP!r} to end the run.",
        "choices": [RETRY, STOP],
        "mission_id": account_id,
        **question(provider, trouble, 1, due),
    }
    waits.hold_step(call.run_id, call.seq, asked, due_at=due, kind=WaitKind.HUMAN)
    raise Suspend(due, f"{said}; waiting for the owner")


def still_held(call: StepCall) -> None:
    """Before a replayed model step asks: if its hold is not due yet (the run was claimed early,
    after a crash between the hold and the suspension, or woken for something else), suspend
    again until it is, without asking the provider; if the owner ended it, fail."""
    if not call.replay:
        return
    _owner_said(call)
    hold = waits.step_hold(call.run_id, call.seq)
    if hold is None or hold.state != WaitState.OPEN or hold.due_at is None:
        return
    if hold.due_at > timezone.now():
        said = hold.question.get("outage", {}).get("said", "the provider")
        raise Suspend(hold.due_at, reason(str(said), hold.due_at))


def _owner_said(call: StepCall) -> None:
    """The owner's answer to the step's question, if it has one: wait on, fail, or go on."""
    asked = waits.step_hold(call.run_id, call.seq, WaitKind.HUMAN)
    if asked is None:
        return
    outage = asked.question.get("outage", {}) if isinstance(asked.question, dict) else {}
    said = str(outage.get("said", "the provider refused the request"))
    if asked.state == WaitState.OPEN and asked.due_at and asked.due_at > timezone.now():
        raise Suspend(asked.due_at, f"{said}; waiting for the owner")
    if asked.state == WaitState.OPEN:
        waits.release_step(call.run_id, call.seq, WaitKind.HUMAN)
        raise StepFailed(f"{said}: the owner did not answer before the question expired")
    if asked.state == WaitState.EXPIRED:
        raise StepFailed(f"{said}: the owner did not answer before the question expired")
    answer = asked.answer.get("text", "") if isinstance(asked.answer, dict) else ""
    if str(answer).strip().lower().startswith(STOP.lower()):
        raise StepFailed(f"{said}: the owner ended the run")


def recovered(call: StepCall) -> Usage | None:
    """The model answered: settle the step's hold, if a former attempt held it (only a
    replayed step can have been held: no query on the hot path); return what the attempts
    before the hold cost."""
    if not call.replay:
        return None
    hold = waits.step_hold(call.run_id, call.seq)
    if hold is None:
        return None
    waits.release_step(call.run_id, call.seq)
    return _lost(hold.question.get("outage") if isinstance(hold.question, dict) else None)


def plus(usage: Usage, more: Usage | None) -> Usage:
    if more is None:
        return usage
    return Usage(**{name: getattr(usage, name) + getattr(more, name) for name in USAGE_FIELDS})


USAGE_FIELDS = [field.name for field in fields(Usage)]


def _lost(held: object) -> Usage:
    """The usage a hold's record kept of the failed attempts (`fail_or_wait`)."""
    kept = held.get("lost_usage") if isinstance(held, dict) else None
    if not isinstance(kept, dict):
        return Usage()
    return Usage(**{name: int(kept.get(name, 0)) for name in USAGE_FIELDS})


def waiting_on(run: Run) -> dict[str, object] | None:
    """What a waiting run waits for, if a provider's failure holds it: `said` ("Anthropic
    overloaded (529)"), `until` (the next attempt, or when the owner's question expires),
    `owner` (True: the owner's answer, `question` its id), `since`, `holds`, `message`. For its
    page and its API."""
    if run.status != RunStatus.WAITING:
        return None
    hold = (
        Wait.objects.filter(
            run=run,
            kind__in=[WaitKind.TIMER, WaitKind.HUMAN],
            state=WaitState.OPEN,
            question__has_key="outage",
        )
        .order_by("-seq")
        .first()
    )
    if hold is None or not isinstance(hold.question.get("outage"), dict):
        return None
    found = dict(hold.question["outage"])
    owner = hold.kind == WaitKind.HUMAN
    return {
        **found,
        "until": hold.due_at,
        "since": hold.created_at,
        "seq": hold.seq,
        "owner": owner,
        "question": hold.pk if owner else None,
    }


def waiting_in(account_id: int) -> list[dict[str, object]]:
    """The runs of a mission that a provider's failure holds, each with what `waiting_on`
    says of it and its `run_id`, oldest hold first."""
    holds = (
        Wait.objects.filter(
            run__account_id=account_id,
            run__status=RunStatus.WAITING,
            kind__in=[WaitKind.TIMER, WaitKind.HUMAN],
            state=WaitState.OPEN,
            question__has_key="outage",
        )
        .select_related("run")
        .order_by("created_at", "pk")
    )
    found = []
    for run in dict.fromkeys(hold.run for hold in holds):
        said = waiting_on(run)
        if said is not None:
            found.append({"run_id": run.pk, **said})
    return found


def retry_now(run_id: int, *, by: str) -> Wait:
    """The owner asks the provider again now, not when the hold is due: the hold falls due at
    once and the run is woken (its next hold, if the provider still fails, waits longer)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            raise KernelError(f"No run {run_id}.", code="not_found", status=404)
        hold = (
            Wait.objects.select_for_update()
            .filter(run=run, kind=WaitKind.TIMER, state=WaitState.OPEN, question__has_key="outage")
            .order_by("-seq")
            .first()
        )
        if run.status != RunStatus.WAITING or hold is None:
            raise KernelError(
                f"Run {run_id} is not waiting on a model provider: there is nothing to retry.",
                code="not_waiting_on_provider",
                status=409,
            )
        now = timezone.now()
        outage = {**hold.question["outage"], "until": now.isoformat()}
        hold.question = {**hold.question, "outage": outage}
        hold.due_at = now
        hold.save(update_fields=["question", "due_at"])
        journal.append_event(
            "run.retry_requested", run_id=run_id, account_id=run.account_id, seq=hold.seq, by=by
        )
        scheduler.wake([run_id])
    return hold


def provider_down(provider: str) -> str | None:
    """Whether `provider` is in an outage now: a run's model step is held waiting it out. Its
    words ("Anthropic overloaded (529)"), for a sub-agent boundary to fail over
    (`missions.contracts`); None when no run waits on it."""
    hold = (
        # A hold left open by a run that ended meanwhile (stopped while it waited) is no sign.
        Wait.objects.filter(
            kind=WaitKind.TIMER, state=WaitState.OPEN, question__outage__provider=provider
        )
        .exclude(run__status__in=TERMINAL)
        .exclude(run__cancel_requested=True)
        .order_by("-created_at")
        .values_list("question", flat=True)
        .first()
    )
    return str(hold["outage"].get("said", provider)) if isinstance(hold, dict) else None
