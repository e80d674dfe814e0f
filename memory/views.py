"""The Memory screen: the scopes, search, the proposals waiting for the owner; a scope's notes
(current, then invalidated), its git history and a form to add a note; one note with its
provenance, a button to verify it and a form to invalidate it.

Reads go through `memory.overview`, the owner's changes through `memory.curation`, as the API's
do. Proposals are decided on their approval's page: this screen only points there.
"""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_safe

from agentos.core import audit
from agentos.core.diffs import diff_lines
from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from memory import curation, overview, scope_names, search
from memory.errors import MemoryRefused
from memory.models import Scope
from memory.notes import MAX_BODY, MAX_TITLE, TYPES
from memory.search import MAX_QUERY

NOTES_SHOWN = 50
HISTORY_SHOWN = 30
PROPOSALS_SHOWN = 20
HITS = 10


class SearchForm(forms.Form):
    q = forms.CharField(label=gettext_lazy("Search"), max_length=MAX_QUERY, required=False)
    scope = forms.ChoiceField(label=gettext_lazy("Scope"), required=False)
    as_of = forms.DateField(
        label=gettext_lazy("As of"),
        required=False,
        help_text=gettext_lazy("What memory held at the end of that day (UTC); empty for now."),
        widget=forms.DateInput(attrs={"type": "date"}),
    )

    def __init__(self, *args: Any, scopes: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        named = scope_names.labels(scopes)
        choices = [("", _("every scope")), *((name, named[name]) for name in scopes)]
        self.fields["scope"].choices = choices  # type: ignore[attr-defined]  # a ChoiceField

    def moment(self) -> datetime | None:
        day = self.cleaned_data["as_of"]
        return datetime.combine(day, time.max, tzinfo=UTC) if day else None


class NoteForm(forms.Form):
    title = forms.CharField(label=gettext_lazy("Title"), max_length=MAX_TITLE)
    body = forms.CharField(
        label=gettext_lazy("Text"),
        max_length=MAX_BODY,
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
    )
    type = forms.ChoiceField(label=gettext_lazy("Kind"), choices=[(t, t) for t in TYPES])
    valid_from = forms.DateTimeField(
        label=gettext_lazy("Holds from"),
        required=False,
        help_text=gettext_lazy("Date and time (UTC); empty for now."),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


class InvalidateForm(forms.Form):
    reason = forms.CharField(
        label=gettext_lazy("Why it no longer holds"),
        max_length=curation.MAX_REASON,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=gettext_lazy("Kept in the scope's history. The note stays, dated."),
    )


@require_safe
@owner_required
def memory_index(request: HttpRequest) -> HttpResponse:
    summaries = overview.scopes()
    form = SearchForm(request.GET or None, scopes=[s.name for s in summaries])
    hits = None
    status = 200
    if form.is_bound and form.is_valid() and form.cleaned_data["q"].strip():
        try:
            hits = overview.find(
                form.cleaned_data["q"],
                scope=form.cleaned_data["scope"],
                as_of=form.moment(),
                k=HITS,
            )
        except MemoryRefused as refused:
            form.add_error(None, refused.message)
            status = refused.status
    elif form.is_bound and not form.is_valid():
        status = 400
    cited = _event_links(e for hit in hits or [] for e in hit.source_events)

    def links(hit: search.Hit) -> list[tuple[int, str]]:
        return [(event, cited[event]) for event in hit.source_events]

    pending, pending_total = overview.proposals(limit=PROPOSALS_SHOWN)
    context = {
        "screen": SCREENS_BY_SLUG["memory"],
        "scopes": summaries,
        "form": form,
        "hits": None if hits is None else [{"hit": hit, "events": links(hit)} for hit in hits],
        "proposals": [_proposal(proposal) for proposal in pending],
        "proposals_total": pending_total,
        "collected_at": timezone.now(),
    }
    return render(request, "memory/index.html", context, status=status)


def _proposal(proposal: overview.Proposal) -> dict[str, Any]:
    lines, hidden = diff_lines(proposal.diff)
    return {"proposal": proposal, "diff": lines, "diff_hidden": hidden}


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def memory_scope(request: HttpRequest, scope: str) -> HttpResponse:
    row = _scope(request, scope)
    if isinstance(row, HttpResponse):
        return row
    form = NoteForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                added = curation.add_note(
                    scope=row.name,
                    title=form.cleaned_data["title"],
                    body=form.cleaned_data["body"],
                    type=form.cleaned_data["type"],
                    valid_from=form.cleaned_data["valid_from"],
                    actor=audit.Actor.of(request),
                )
            except MemoryRefused as refused:
                form.add_error(None, refused.message)
                status = refused.status
            else:
                messages.success(request, _("Note added: %(title)s") % {"title": added.title})
                return redirect("console:memory-note", scope=row.name, path=added.path)
        else:
            status = 400
    current_offset = _offset(request, "current")
    ended_offset = _offset(request, "ended")
    current, current_total = overview.notes_of(
        row, ended=False, limit=NOTES_SHOWN, offset=current_offset
    )
    ended, ended_total = overview.notes_of(row, ended=True, limit=NOTES_SHOWN, offset=ended_offset)
    context = {
        "screen": SCREENS_BY_SLUG["memory"],
        "scope": overview.summary(row),
        "current": current,
        "current_total": current_total,
        "current_page": _page(request, "current", current_offset, len(current), current_total),
        "ended": ended,
        "ended_total": ended_total,
        "ended_page": _page(request, "ended", ended_offset, len(ended), ended_total),
        "history": overview.history(row.name, limit=HISTORY_SHOWN),
        "history_shown": HISTORY_SHOWN,
        "form": form,
        "collected_at": timezone.now(),
    }
    return render(request, "memory/scope.html", context, status=status)


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def memory_note(request: HttpRequest, scope: str, path: str) -> HttpResponse:
    try:
        note = overview.note(scope, path)
    except MemoryRefused as refused:
        return _refused_page(request, refused)
    form = InvalidateForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                curation.invalidate_note(
                    scope=note.scope.name,
                    path=note.path,
                    reason=form.cleaned_data["reason"],
                    actor=audit.Actor.of(request),
                )
            except MemoryRefused as refused:
                form.add_error(None, refused.message)
                status = refused.status
            else:
                messages.success(request, _("The note no longer holds from now."))
                return redirect("console:memory-note", scope=note.scope.name, path=note.path)
        else:
            status = 400
    context = {
        "screen": SCREENS_BY_SLUG["memory"],
        "note": note,
        "events": list(_event_links(note.source_events).items()),
        "form": form,
        "holds": note.invalid_at is None or note.invalid_at > timezone.now(),
    }
    return render(request, "memory/note.html", context, status=status)


@require_http_methods(["POST"])
@owner_required
def memory_note_verify(request: HttpRequest, scope: str, path: str) -> HttpResponse:
    """The owner verifies this note (`curation.verify_note`, as the API does)."""
    try:
        note = overview.note(scope, path)
    except MemoryRefused as refused:
        return _refused_page(request, refused)
    try:
        curation.verify_note(scope=note.scope.name, path=note.path, actor=audit.Actor.of(request))
    except MemoryRefused as refused:
        context = {
            "screen": SCREENS_BY_SLUG["memory"],
            "note": overview.note(scope, path),
            "events": list(_event_links(note.source_events).items()),
            "form": InvalidateForm(),
            "holds": note.invalid_at is None or note.invalid_at > timezone.now(),
            "verify_error": refused.message,
        }
        return render(request, "memory/note.html", context, status=refused.status)
    messages.success(request, _("Verified: later runs are given this note."))
    return redirect("console:memory-note", scope=note.scope.name, path=note.path)


def _scope(request: HttpRequest, scope: str) -> Scope | HttpResponse:
    try:
        return overview.current(scope)
    except MemoryRefused as refused:
        return _refused_page(request, refused)


def _refused_page(request: HttpRequest, refused: MemoryRefused) -> HttpResponse:
    """A malformed or unknown scope or note is a page that does not exist, saying why."""
    if refused.status not in (400, 404):
        raise Http404(refused.message)
    context = {"status": 404, "heading": _("Not in memory"), "message": refused.message}
    return render(request, "console/error.html", context, status=404)


def _offset(request: HttpRequest, name: str) -> int:
    raw = request.GET.get(name, "")
    return min(int(raw), 10**9) if raw.isdigit() else 0


def _page(request: HttpRequest, name: str, offset: int, shown: int, total: int) -> dict[str, Any]:
    """Which of `total` are shown, and the query strings of the previous and next pages."""

    def at(start: int) -> str:
        query = request.GET.copy()
        query[name] = str(start)
        return "?" + query.urlencode() + f"#{name}"

    return {
        "first": offset + 1 if shown else 0,
        "last": offset + shown,
        "previous": at(max(offset - NOTES_SHOWN, 0)) if offset else None,
        "next": at(offset + NOTES_SHOWN) if offset + shown < total else None,
    }


def _event_links(ids: Any) -> dict[int, str]:
    """Each cited event by id: the run page at its step, where the console shows it; "" for
    one it no longer holds (the id alone is shown)."""
    cited = list(ids)
    places = overview.event_places(cited)
    links = {}
    for event in sorted(set(cited)):
        place = places.get(event)
        if place is None:
            links[event] = ""
            continue
        run, seq = place
        links[event] = reverse("console:run", args=[run]) + (f"#step-{seq}" if seq else "")
    return links
