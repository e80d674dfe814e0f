"""What the owner is told of, and when: every outcome, each one `Notification` row.

- What: a wait for the owner (approval, question, unknown outcome), a mission's end (its root
  run done, failed, blocked, cancelled or stopped by a cap), a cap 80 % used
  (`kernel.notices`), a run held by a provider's outage for more than an hour
  (`missions.engine.outage` holds its step on a timer wait), an agent's `notify_owner`.
- Durable: rows are derived from the event stream (`kernel.stream`) and from the open holds,
  under the push cursor's row lock and in the transaction that moves the cursor; each row's
  `key` names what it tells of (unique). A crash before the commit derives them again, after
  it they exist once: never lost, never doubled.
- Delivery: the owner's choice per kind (`NotificationSettings`): off (the Home screen only),
  at once (pushed), or in the daily digest (one push a day at their hour, in their time zone,
  itself a row keyed by the day). An agent's messages are pushed at most once per mission per
  `AGENT_PUSH_MINUTES`; the rest are on the Home screen.
- Pushing: rows to push are claimed with a lease (`SKIP LOCKED`) and posted to every device
  (`approvals.push.send`). A crash after the post and before it is marked posts it again when
  the lease ends: the same `tag`, so the phone replaces the first rather than showing two.

`deliver_one` is called in a loop by every worker process (`approvals.tasks`).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from agentos.core import reachability
from agentos.core.errors import DomainError
from agentos.core.models import PushState, PushSubscription
from approvals import push
from approvals.models import Delivery, Mode, Notification, NotificationSettings, Told
from kernel import stream
from kernel.models import Event, Run, RunStatus, Wait, WaitKind, WaitState

logger = logging.getLogger(__name__)

BATCH = 50
# The events that tell the owner something.
FOLLOWED = ("wait.opened", "budget.notice", "run.finished", "owner.notified")
# An agent may tell the owner something at most this often per mission on their phone.
AGENT_PUSH_MINUTES = 15
# A run held by a provider this long is worth telling (the horizon's first hour).
PROVIDER_WAIT = timedelta(hours=1)
# How long a process has to post a claimed row before another may take it over.
LEASE = timedelta(seconds=60)
# A row whose posting crashed its process this many times is left on the Home screen.
MAX_ATTEMPTS = 3
HOME_LIMIT = 8
TEXT_CHARS = 200

# A root run's end, as the owner reads it.
ENDS: dict[str, tuple[str, Any]] = {
    RunStatus.DONE: (Told.MISSION_DONE, gettext_lazy("Mission done")),
    RunStatus.PARTIAL: (Told.MISSION_DONE, gettext_lazy("Mission partly done")),
    RunStatus.FAILED: (Told.MISSION_FAILED, gettext_lazy("Mission failed")),
    RunStatus.BLOCKED: (Told.MISSION_BLOCKED, gettext_lazy("Mission blocked")),
    RunStatus.CANCELLED: (Told.MISSION_CANCELLED, gettext_lazy("Mission cancelled")),
    RunStatus.BUDGET_EXHAUSTED: (Told.MISSION_CAPPED, gettext_lazy("Mission stopped by a cap")),
}
# Kinds that cannot wait for a digest: an approval expires, it is asked now or not at all.
NO_DIGEST = frozenset({Told.WAITING})
# Kinds listed on the Home screen ("Told you"); what waits has its own card.
LISTED = [kind for kind in Told.values if kind not in (Told.WAITING, Told.DIGEST)]


@dataclass(frozen=True)
class Draft:
    key: str
    kind: str
    title: str
    body: str
    url: str
    account_id: int | None = None
    run_id: int | None = None
    wait_id: int | None = None


# --- the owner's choices ------------------------------------------------------------------------


def preferences() -> NotificationSettings:
    found = NotificationSettings.objects.filter(pk=1).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return NotificationSettings.objects.create(pk=1)
    except IntegrityError:  # another process made it first
        return NotificationSettings.objects.get(pk=1)


def choose(*, modes: dict[str, str], digest_hour: int, time_zone: str) -> NotificationSettings:
    """Keep the owner's choices; a kind missing from `modes` keeps its choice."""
    for kind, mode in modes.items():
        if kind not in Told.values or kind == Told.DIGEST or mode not in Mode.values:
            raise DomainError(_("Unknown choice %(kind)s.") % {"kind": kind}, code="bad_choice")
        if mode == Mode.DIGEST and kind in NO_DIGEST:
            raise DomainError(_("What waits for you is told at once or not at all."))
    if not 0 <= digest_hour <= 23:
        raise DomainError(_("The digest's hour is between 0 and 23."), code="bad_hour")
    zone(time_zone)
    with transaction.atomic():
        prefs = preferences()
        prefs = NotificationSettings.objects.select_for_update().get(pk=prefs.pk)
        prefs.modes = {**(prefs.modes if isinstance(prefs.modes, dict) else {}), **modes}
        prefs.digest_hour = digest_hour
        prefs.time_zone = time_zone
        prefs.save()
    return prefs


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise DomainError(
            _("%(zone)s is not a time zone (try Europe/Paris).") % {"zone": name[:60]},
            code="bad_time_zone",
        ) from None


# --- deriving rows ------------------------------------------------------------------------------


def deliver_one(now: datetime | None = None) -> bool:
    """Derive what to tell, then push it; True while more may be pending.

    1. Number what committed (`stream.sequence`); holding the cursor's row (skipped if another
       process holds it: that one is at work), derive the rows of the next events, of the runs
       held by a provider past the hour and the day's digest, and move the cursor past those
       events, in one transaction.
    2. After commit, claim and post the rows to push (`push_pending`).
    """
    now = now or timezone.now()
    stream.sequence()
    push.state()
    more = False
    with transaction.atomic():
        locked = PushState.objects.select_for_update(skip_locked=True).filter(pk=1).first()
        if locked is not None:
            head = stream.head()
            events = list(
                Event.objects.filter(
                    number__gt=locked.cursor, number__lte=head, kind__in=FOLLOWED
                ).order_by("number")[:BATCH]
            )
            more = len(events) == BATCH
            cursor = events[-1].number if more and events[-1].number else head
            prefs = preferences()
            for draft in drafts_of(events) + provider_waits(now):
                record(draft, prefs, now)
            digest(prefs, now)
            if cursor != locked.cursor:
                PushState.objects.filter(pk=1).update(cursor=cursor)
    return push_pending(now) or more


def record(draft: Draft, prefs: NotificationSettings, now: datetime) -> Notification | None:
    """The row of `draft`, unless one tells of it already; delivered as the owner chose."""
    mode = prefs.mode(draft.kind)
    by_mode: dict[str, str] = {Mode.NOW: Delivery.PUSH, Mode.DIGEST: Delivery.DIGEST}
    delivery = by_mode.get(mode, Delivery.HOME)
    if draft.kind == Told.AGENT_MESSAGE and delivery == Delivery.PUSH and _agent_pushed(draft, now):
        delivery = Delivery.HOME
    row, created = Notification.objects.get_or_create(
        key=draft.key,
        defaults={
            "kind": draft.kind,
            "title": _line(draft.title, 120),
            "body": _line(draft.body, TEXT_CHARS),
            "url": draft.url,
            "account_id": draft.account_id,
            "run_id": draft.run_id,
            "wait_id": draft.wait_id,
            "delivery": delivery,
            "created_at": now,
        },
    )
    return row if created else None


def _agent_pushed(draft: Draft, now: datetime) -> bool:
    """Whether this mission's agent had a message pushed within the last minutes."""
    return Notification.objects.filter(
        kind=Told.AGENT_MESSAGE,
        account_id=draft.account_id,
        delivery=Delivery.PUSH,
        created_at__gt=now - timedelta(minutes=AGENT_PUSH_MINUTES),
    ).exists()


def drafts_of(events: list[Event]) -> list[Draft]:
    """What each event tells the owner, in the stream's order (none for a timer, a join, a
    sub-agent's end)."""
    waits = _open_waits(events)
    ends = _root_ends(events)
    found: list[Draft] = []
    for event in events:
        draft: Draft | None = None
        if event.kind == "wait.opened":
            draft = _waiting(waits.get(event.data.get("wait")))
        elif event.kind == "budget.notice":
            message = push.notice_message(event)
            draft = Draft(
                key=f"notice:{event.data.get('key', event.pk)}",
                kind=Told.CAP_NEAR,
                title=message.title,
                body=message.body,
                url=message.url,
                account_id=event.account_id,
                run_id=event.run_id,
            )
        elif event.kind == "run.finished" and event.run_id in ends:
            draft = _ended(event, ends[event.run_id])
        elif event.kind == "owner.notified":
            draft = _agent_message(event)
        if draft is not None:
            found.append(draft)
    return found


def _open_waits(events: list[Event]) -> dict[Any, Wait]:
    ids = [e.data.get("wait") for e in events if e.kind == "wait.opened"]
    found = Wait.objects.filter(
        pk__in=[i for i in ids if isinstance(i, int)], state=WaitState.OPEN
    ).select_related("run__account__mission")
    return {wait.pk: wait for wait in found}


def _waiting(wait: Wait | None) -> Draft | None:
    message = push.message_for(wait) if wait is not None else None
    if wait is None or message is None:
        return None
    return Draft(
        key=f"wait:{wait.pk}",
        kind=Told.WAITING,
        title=message.title,
        body=message.body,
        url=message.url,
        account_id=wait.run.account_id,
        run_id=wait.run_id,
        wait_id=wait.pk,
    )


def _root_ends(events: list[Event]) -> dict[int, str]:
    """The missions' goals of the root runs whose end is among `events` (a sub-agent's end is
    its parent's business, a run of no mission has no screen to open)."""
    ids = [e.run_id for e in events if e.kind == "run.finished" and e.run_id is not None]
    if not ids:
        return {}
    runs = Run.objects.filter(
        pk__in=ids, parent__isnull=True, account__mission__isnull=False
    ).values_list("pk", "account__mission__goal")
    return {pk: str(goal or "") for pk, goal in runs}


def _ended(event: Event, goal: str) -> Draft | None:
    status = str(event.data.get("status", ""))
    if status not in ENDS:
        return None
    kind, title = ENDS[status]
    error = str(event.data.get("error") or "")
    return Draft(
        key=f"run:{event.run_id}:end",
        kind=kind,
        title=str(title),
        body=f"{_line(goal, 120)}: {error}" if error and kind != Told.MISSION_DONE else goal,
        url=reverse("console:mission", args=[event.account_id]),
        account_id=event.account_id,
        run_id=event.run_id,
    )


def _agent_message(event: Event) -> Draft | None:
    if event.account_id is None:
        return None
    # The agent's words, shown as text only (a notification, an escaped template).
    return Draft(
        key=f"agent:{event.run_id}:{event.seq if event.seq is not None else event.pk}",
        kind=Told.AGENT_MESSAGE,
        title=_("A mission's agent says"),
        body=str(event.data.get("message", "")),
        url=reverse("console:mission", args=[event.account_id]),
        account_id=event.account_id,
        run_id=event.run_id,
    )


def provider_waits(now: datetime) -> list[Draft]:
    """The runs held by a provider's outage for more than an hour, not yet told of."""
    holds = list(
        Wait.objects.filter(
            kind=WaitKind.TIMER,
            state=WaitState.OPEN,
            question__has_key="outage",
            created_at__lte=now - PROVIDER_WAIT,
            run__status=RunStatus.WAITING,
        ).select_related("run__account__mission")
    )
    told = set(
        Notification.objects.filter(key__in=[f"outage:{h.pk}" for h in holds]).values_list(
            "key", flat=True
        )
    )
    found = []
    for hold in holds:
        if f"outage:{hold.pk}" in told:
            continue
        outage = hold.question.get("outage") if isinstance(hold.question, dict) else None
        said = str(outage.get("said", "")) if isinstance(outage, dict) else ""
        mission = getattr(hold.run.account, "mission", None)
        found.append(
            Draft(
                key=f"outage:{hold.pk}",
                kind=Told.PROVIDER_WAIT,
                title=_("A run waits on its provider"),
                body=f"{said or _('The provider is unavailable')} · {getattr(mission, 'goal', '')}",
                url=reverse("console:run", args=[hold.run_id]),
                account_id=hold.run.account_id,
                run_id=hold.run_id,
            )
        )
    return found


# --- the daily digest ---------------------------------------------------------------------------


def digest(prefs: NotificationSettings, now: datetime) -> Notification | None:
    """Once a day, from the owner's hour in their time zone: one row summing up what was kept
    for the digest, pushed if anything was (keyed by the day: made once whoever retries)."""
    if not any(prefs.mode(kind) == Mode.DIGEST for kind in LISTED):
        return None
    local = now.astimezone(zone(prefs.time_zone))
    if local.hour < prefs.digest_hour:
        return None
    key = f"digest:{local.date().isoformat()}"
    if Notification.objects.filter(key=key).exists():
        return None
    kept = list(
        Notification.objects.select_for_update()
        .filter(delivery=Delivery.DIGEST, digested_at__isnull=True)
        .order_by("pk")
    )
    row = Notification.objects.create(
        key=key,
        kind=Told.DIGEST,
        title=_("Your day"),
        body=_line(summary(Counter(n.kind for n in kept)), TEXT_CHARS),
        url=reverse("console:home") + "#told",
        delivery=Delivery.PUSH if kept else Delivery.HOME,
        created_at=now,
        read_at=now,  # the rows it sums up are on the Home screen, not the digest itself
    )
    Notification.objects.filter(pk__in=[n.pk for n in kept]).update(digested_at=now)
    return row


# How each kind is counted in a digest's line.
COUNTED = {
    Told.MISSION_DONE: ("%(n)d mission done", "%(n)d missions done"),
    Told.MISSION_FAILED: ("%(n)d failed", "%(n)d failed"),
    Told.MISSION_BLOCKED: ("%(n)d blocked", "%(n)d blocked"),
    Told.MISSION_CANCELLED: ("%(n)d cancelled", "%(n)d cancelled"),
    Told.MISSION_CAPPED: ("%(n)d stopped by a cap", "%(n)d stopped by a cap"),
    Told.CAP_NEAR: ("%(n)d cap 80 %% used", "%(n)d caps 80 %% used"),
    Told.PROVIDER_WAIT: ("%(n)d run waiting on a provider", "%(n)d runs waiting on a provider"),
    Told.AGENT_MESSAGE: ("%(n)d message from an agent", "%(n)d messages from agents"),
}


def summary(counts: Counter[str]) -> str:
    parts = [
        ngettext(one, many, counts[kind]) % {"n": counts[kind]}
        for kind, (one, many) in COUNTED.items()
        if counts[kind]
    ]
    return " · ".join(parts) if parts else _("Nothing to tell today.")


# --- pushing ------------------------------------------------------------------------------------


def push_pending(now: datetime | None = None) -> bool:
    """Post the rows to push; True if a whole batch was taken (more may wait).

    1. Claim the next rows not leased (or whose lease ended: their process died), in a short
       transaction that skips rows another process is claiming.
    2. Post each to every device; a wait settled meanwhile no longer needs telling. Mark each
       posted: a crash before that posts it again after the lease (same tag: one on the phone).
    """
    now = now or timezone.now()
    with transaction.atomic():
        rows = list(
            Notification.objects.select_for_update(skip_locked=True)
            .filter(delivery=Delivery.PUSH, pushed_at__isnull=True)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
            .order_by("pk")[:BATCH]
        )
        Notification.objects.filter(pk__in=[row.pk for row in rows]).update(
            claimed_until=now + LEASE, attempts=F("attempts") + 1
        )
    if not rows:
        return False
    devices = PushSubscription.objects.exists()
    still_open = set(
        Wait.objects.filter(
            pk__in=[row.wait_id for row in rows if row.wait_id], state=WaitState.OPEN
        ).values_list("pk", flat=True)
    )
    for row in rows:
        posted = row.attempts < MAX_ATTEMPTS and (row.wait_id is None or row.wait_id in still_open)
        if posted and devices:
            push.send(message(row))
        Notification.objects.filter(pk=row.pk).update(
            pushed_at=timezone.now() if posted else None,
            delivery=Delivery.PUSH if posted else Delivery.HOME,
            claimed_until=None,
        )
    return len(rows) == BATCH


def message(row: Notification) -> push.Message:
    # One tag per thing told: a second post of it replaces the first on the device.
    return push.Message(title=row.title, body=row.body, url=row.url, tag=row.key.replace(":", "-"))


# --- the Home screen ----------------------------------------------------------------------------


def unread() -> dict[str, Any]:
    """The Home screen's "Told you" card: what the owner was told of and has not dismissed."""
    rows = Notification.objects.filter(read_at__isnull=True, kind__in=LISTED)
    items = list(rows[:HOME_LIMIT])
    return {
        "items": items,
        "more": max(rows.count() - len(items), 0) if len(items) == HOME_LIMIT else 0,
        "collected_at": timezone.now(),
    }


def mark_read(notification_id: int | None = None) -> int:
    """Dismiss one notification from the Home screen, or all (None); how many were."""
    rows = Notification.objects.filter(read_at__isnull=True, kind__in=LISTED)
    if notification_id is not None:
        rows = rows.filter(pk=notification_id)
    return rows.update(read_at=timezone.now())


def _line(text: str, chars: int) -> str:
    return Truncator(" ".join(str(text).split())).chars(chars)


# --- the follower -------------------------------------------------------------------------------

POLL_SECONDS = 1.0


def follow_until(stopping: threading.Event) -> None:
    """Deliver until `stopping` is set (a worker process's thread, see `approvals.tasks`)."""
    backoff = reachability.Backoff()
    while not stopping.is_set():
        pause = POLL_SECONDS
        try:
            more = deliver_one()
        except Exception as error:
            # The database away (said once, then waited for with a backoff), a vault key
            # missing: the next round tries again.
            connection.close()
            more = False
            if reachability.is_unreachable(error):
                reachability.went_away(error, where="push delivery")
                pause = max(pause, backoff.next_delay())
            else:
                logger.exception("push delivery round failed")
        else:
            backoff.reset()
            reachability.came_back()
        if not more:
            stopping.wait(pause)
