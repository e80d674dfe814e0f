"""Owner steering: messages queued for a running agent, delivered at its next model call."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from kernel import journal, runs, scheduler
from kernel.models import Run, Trust
from missions.errors import MissionError
from missions.models import OwnerMessage

MAX_CHARS = 20_000


def send_message(*, run_id: int, text: str, interrupt: bool = False) -> OwnerMessage:
    """Queue `text` for the run and wake it if it waits (an owner answer may be what it needs).

    With `interrupt`, the step it is executing is cut short too, so the message arrives now
    rather than after a long tool call.
    """
    text = text.strip()
    if not text:
        raise MissionError("A steering message cannot be empty.")
    if len(text) > MAX_CHARS:
        raise MissionError(f"A steering message has at most {MAX_CHARS} characters.")
    with transaction.atomic():
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            raise MissionError(f"No run {run_id}.", code="not_found", status=404)
        if run.is_terminal:
            raise MissionError(
                f"Run {run_id} has ended ({run.status}); start a new one.",
                code="run_ended",
                status=409,
            )
        message = OwnerMessage.objects.create(run=run, text=text)
        journal.append_event(
            "owner.message",
            run_id=run.pk,
            account_id=run.account_id,
            trust=Trust.OWNER,
            message=message.pk,
        )
        scheduler.wake([run.pk])
        if interrupt:
            runs.request_interrupt(run.pk)
    return message


def take_pending(*, run_id: int, seq: int) -> list[str]:
    """The messages for the model step `seq`: those not yet delivered, and those delivered to
    this very step by an attempt that died before recording it (so a replay loses none)."""
    # The usual answer is "none": one indexed read, no transaction, no lock.
    waiting = OwnerMessage.objects.filter(run_id=run_id).filter(
        Q(delivered_seq__isnull=True) | Q(delivered_seq=seq)
    )
    if not waiting.exists():
        return []
    with transaction.atomic():
        pending = list(
            OwnerMessage.objects.select_for_update()
            .filter(run_id=run_id)
            .filter(delivered_seq__isnull=True)
            | OwnerMessage.objects.filter(run_id=run_id, delivered_seq=seq)
        )
        OwnerMessage.objects.filter(pk__in=[m.pk for m in pending]).update(delivered_seq=seq)
    return [m.text for m in sorted(pending, key=lambda m: (m.created_at, m.pk))]
