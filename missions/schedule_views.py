"""The Schedules screen: recurring missions with their next time, a form to create or change
one (its next five times shown as the cron is typed), pause and resume, delete after a
confirmation, and each one's history with a link to every mission it started. Every change
goes through `missions.schedules`, as from the API."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from agentos.core import audit
from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from missions import schedules
from missions.errors import MissionError
from missions.models import Project, Schedule
from missions.schedule_forms import ScheduleForm, initial_for

HISTORY_SHOWN = 100


def _context(**values: Any) -> dict[str, Any]:
    return {"screen": SCREENS_BY_SLUG["schedules"], **values}


@require_safe
@owner_required
def schedule_list(request: HttpRequest) -> HttpResponse:
    rows = []
    for schedule in Schedule.objects.all():
        upcoming = schedules.next_times(schedule) if schedule.enabled else []
        last = schedule.firings.order_by("-due_at").first()
        rows.append({"schedule": schedule, "next": upcoming[0] if upcoming else None, "last": last})
    return render(request, "missions/schedules.html", _context(rows=rows))


@require_http_methods(["GET", "POST"])
@owner_required
def schedule_new(request: HttpRequest) -> HttpResponse:
    return _edit(request, None)


@require_http_methods(["GET", "POST"])
@owner_required
def schedule_edit(request: HttpRequest, schedule_id: int) -> HttpResponse:
    return _edit(request, get_object_or_404(Schedule, pk=schedule_id))


def _edit(request: HttpRequest, schedule: Schedule | None) -> HttpResponse:
    form = ScheduleForm(request.POST or None, initial=initial_for(schedule))
    status = 200
    if request.method == "POST":
        if form.is_valid():
            earlier = schedule.mission if schedule is not None else None
            values = form.schedule_values(earlier)
            try:
                if schedule is None:
                    values["time_zone"] = values.pop("timezone")
                    saved = schedules.create_schedule(**values, actor=audit.Actor.of(request))
                else:
                    saved = schedules.update_schedule(
                        schedule.pk, values, actor=audit.Actor.of(request)
                    )
            except MissionError as refused:
                form.show_refusal(refused)
            else:
                messages.success(request, _("Schedule “%(name)s” saved.") % {"name": saved.name})
                return redirect("console:schedules")
        status = 400
    preview = _preview(form["cron"].value() or "", form["timezone"].value() or "")
    if "cron" in form.errors:  # said next to the field already
        preview = {"times": None, "problem": ""}
    context = _context(
        form=form, schedule=schedule, has_projects=Project.objects.exists(), **preview
    )
    return render(request, "missions/schedule_form.html", context, status=status)


@require_safe
@owner_required
def schedule_preview(request: HttpRequest) -> HttpResponse:
    """The next five times of the cron being typed (htmx), in the time zone chosen."""
    preview = _preview(request.GET.get("cron", ""), request.GET.get("timezone", ""))
    return render(request, "missions/schedule_form.html#preview", preview)


def _preview(expression: str, zone_name: str) -> dict[str, Any]:
    if not str(expression).strip():
        return {"times": None, "problem": ""}
    try:
        return {"times": schedules.preview(str(expression), str(zone_name)), "problem": ""}
    except ValueError as error:
        return {"times": None, "problem": str(error)}


@require_POST
@owner_required
def schedule_toggle(request: HttpRequest, schedule_id: int) -> HttpResponse:
    get_object_or_404(Schedule, pk=schedule_id)
    enabled = request.POST.get("enabled") == "yes"
    schedule = schedules.set_enabled(schedule_id, enabled, actor=audit.Actor.of(request))
    said = _("Schedule “%(name)s” resumed.") if enabled else _("Schedule “%(name)s” paused.")
    messages.success(request, said % {"name": schedule.name})
    return redirect("console:schedules")


@require_http_methods(["GET", "POST"])
@owner_required
def schedule_delete(request: HttpRequest, schedule_id: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule, pk=schedule_id)
    if request.method == "POST" and request.POST.get("confirm") == "yes":
        schedules.delete_schedule(schedule.pk, actor=audit.Actor.of(request))
        messages.success(request, _("Schedule “%(name)s” deleted.") % {"name": schedule.name})
        return redirect("console:schedules")
    return render(request, "missions/schedule_delete.html", _context(schedule=schedule))


@require_safe
@owner_required
def schedule_history(request: HttpRequest, schedule_id: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule, pk=schedule_id)
    firings = list(schedules.history(schedule.pk, limit=HISTORY_SHOWN))
    context = _context(
        schedule=schedule,
        firings=firings,
        total=schedule.firings.count(),
        upcoming=schedules.next_times(schedule) if schedule.enabled else [],
    )
    return render(request, "missions/schedule_history.html", context)
