"""`Idempotency-Key` on every write of /api/v1: a retried request is answered, never applied twice.

Semantics (Stripe's): the same key with the same method, path and body replays the first answer
(status and body, header `Idempotent-Replayed: true`) without running anything again; the same
key with another method, path or body is refused (422 `idempotency_key_reused`); a request whose
key is held by one still running is refused (409 `idempotency_in_progress`). Keys are the
owner's, at most 255 characters, and kept 24 hours (`prune`, run hourly by `agentos.tasks`).

Design: the record is written in the **same transaction** as the write it protects, instead of
being reserved first and completed after (Stripe's way). A write request with a key runs inside
one transaction that also inserts the record, so a crash before the commit loses both (a retry
runs again, and nothing was applied) and a commit keeps both (a retry replays): no window in
which the write is done but not recorded. While it runs, the request holds a transaction-level
advisory lock on (owner, key); a concurrent request with the same key fails to take it and gets
409 at once rather than waiting. Every write behind /api/v1 is a database write (journal rows,
events, NOTIFY delivered at commit, doorbells sent `on_commit`), which is what makes one
transaction enough; an endpoint with an effect outside the database would need the reservation
scheme instead.

What is recorded: answers of requests that reached their view (authenticated, schema-valid),
errors included (a 409 "run ended" replays as such). Answers refused before the view (401, 422
of schema validation, 400 of malformed JSON, these 409/422 of the key itself) are not recorded,
and neither are 5xx answers: their transaction is rolled back whole, so the owner may retry with
the same key. A response carrying a secret shown once (`@withholds_secret`, e.g. a new API
token) is recorded without its body: a replay answers 409 `idempotency_secret_withheld`.

Wiring: `agentos.api` installs `guard_operation` around each operation (before authentication)
and `guard_view` around each view function (after authentication and validation).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, models, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.utils import timezone
from django.utils.translation import gettext as _

from agentos.core.errors import DomainError

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
KEPT_FOR = timedelta(hours=24)
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class IdempotencyKey(models.Model):
    """A write answered under a client's key: replayed, never run again, for `KEPT_FOR`."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=MAX_KEY_LENGTH)
    method = models.CharField(max_length=10)
    path = models.TextField()
    # sha256 of the method, the path with its query and the body (JSON in canonical form).
    fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    content_type = models.CharField(max_length=200, blank=True)
    body = models.BinaryField(blank=True)
    # The answer held a secret shown once: it was not stored, a replay says so.
    withheld = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)  # prune's range scan

    class Meta:
        app_label = "agentos"
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="idempotency_key_once_per_owner")
        ]

    def __str__(self) -> str:
        return f"{self.key} → {self.method} {self.path} {self.status}"


@dataclass
class _Pending:
    """What `guard_operation` hands to `guard_view` (and gets back) through the request."""

    key: str
    owner: User | None = None  # set once the view runs: its answer is to be recorded
    fingerprint: str = ""
    withheld: bool = False
    # Writes to keep although the view's savepoint is rolled back (see `refused_in_view`).
    kept: list[Callable[[], object]] = field(default_factory=list)


def withholds_secret[F: Callable[..., Any]](view: F) -> F:
    """Mark a view whose answer holds a secret shown once: its body is never stored."""
    view.idempotency_withholds_secret = True  # type: ignore[attr-defined]  # a marker attribute
    return view


def guard_operation[F: Callable[..., HttpResponseBase]](run: F) -> F:
    """Around a whole operation: one transaction for the write and the record of its key."""

    @wraps(run)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        key = request.headers.get(HEADER)
        if key is None or request.method not in WRITE_METHODS:
            return run(request, *args, **kwargs)
        pending = _Pending(key=key)
        request.idempotency = pending  # type: ignore[attr-defined]  # read by guard_view
        with transaction.atomic():
            response = run(request, *args, **kwargs)
            for record in pending.kept:
                record()
            if pending.owner is None:
                return response  # refused before the view, or replayed: nothing to record
            if response.status_code >= 500 or not isinstance(response, HttpResponse):
                transaction.set_rollback(True)  # a retry with the same key may run again
                return response
            try:
                with transaction.atomic():
                    _record(request, pending, response)
            except IntegrityError:
                # Recorded meanwhile under this key (only a lock-hash collision lets two
                # requests through): undo this one, as if it had never started.
                transaction.set_rollback(True)
                return _in_progress_response()
        return response

    return wrapper  # type: ignore[return-value]  # same signature, wrapped


def guard_view[F: Callable[..., Any]](view: F) -> F:
    """Around a view, once authenticated and validated: replay, refuse, or run and record."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        pending: _Pending | None = getattr(request, "idempotency", None)
        if pending is None:
            return view(request, *args, **kwargs)
        owner = getattr(request, "auth", None)
        if not isinstance(owner, User):  # an operation without authentication: nothing to scope
            return view(request, *args, **kwargs)
        key = pending.key
        if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
            raise DomainError(
                _("An Idempotency-Key has 1 to %(max)s printable characters.")
                % {"max": MAX_KEY_LENGTH},
                code="invalid_idempotency_key",
                status=400,
            )
        if not _try_lock(owner, key):
            raise DomainError(
                _("A request with this Idempotency-Key is still running; retry later."),
                code="idempotency_in_progress",
                status=409,
            )
        record = IdempotencyKey.objects.filter(owner=owner, key=key).first()
        if record is not None and record.created_at < timezone.now() - KEPT_FOR:
            record.delete()  # expired: the key is free again (prune may not have run yet)
            record = None
        sent = fingerprint(request)
        if record is not None:
            return _replay(record, sent)
        pending.owner, pending.fingerprint = owner, sent
        pending.withheld = bool(getattr(view, "idempotency_withholds_secret", False))
        # A savepoint: a view that fails leaves the request's transaction usable for its answer.
        with transaction.atomic():
            return view(request, *args, **kwargs)

    return wrapper  # type: ignore[return-value]  # same signature, wrapped


def refused_in_view(request: HttpRequest, record: Callable[[], object]) -> None:
    """The view refuses the request as authentication would (a token's scope, which only the
    view knows): its answer is not recorded, so a retry with a token allowed to runs; and
    `record` (the refusal's audit row) is written outside the view's savepoint, which the
    refusal rolls back, so it is kept."""
    pending: _Pending | None = getattr(request, "idempotency", None)
    if pending is None:
        record()
        return
    pending.owner = None
    pending.kept.append(record)


def fingerprint(request: HttpRequest) -> str:
    """What makes two requests "the same": method, path with query, body (JSON canonical)."""
    body = request.body
    with contextlib.suppress(ValueError):  # not JSON (or empty): compared byte for byte
        body = json.dumps(
            json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    digest = hashlib.sha256()
    for part in (str(request.method).encode(), request.get_full_path().encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def prune(now: datetime | None = None) -> int:
    """Forget keys older than `KEPT_FOR`; return how many."""
    cutoff = (now or timezone.now()) - KEPT_FOR
    deleted, _by_model = IdempotencyKey.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the optional `Idempotency-Key` header to every write operation of an OpenAPI schema."""
    parameter = {
        "in": "header",
        "name": HEADER,
        "required": False,
        "description": (
            "Client-chosen key (1 to 255 printable characters) making the write safe to retry "
            "for 24 hours: the same request is answered again without running, another request "
            "under the same key is refused."
        ),
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH},
    }
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            if method.upper() in WRITE_METHODS and isinstance(operation, dict):
                parameters = operation.setdefault("parameters", [])
                if not any(p.get("name") == HEADER for p in parameters):
                    parameters.append(dict(parameter))
    return schema


def _try_lock(owner: User, key: str) -> bool:
    # Transaction-level: released by the commit or rollback of the request's transaction.
    lock_id = int.from_bytes(
        hashlib.sha256(f"idempotency:{owner.pk}:{key}".encode()).digest()[:8], "big", signed=True
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [lock_id])
        row = cursor.fetchone()
    return bool(row and row[0])


def _replay(record: IdempotencyKey, sent: str) -> HttpResponse:
    if record.fingerprint != sent:
        raise DomainError(
            _(
                "This Idempotency-Key was used for another request (%(method)s %(path)s); "
                "use a new key for a new request."
            )
            % {"method": record.method, "path": record.path},
            code="idempotency_key_reused",
            status=422,
            details={"method": record.method, "path": record.path},
        )
    if record.withheld:
        raise DomainError(
            _(
                "This request already succeeded (status %(status)s); its answer held a secret "
                "shown only once, so it is not replayed."
            )
            % {"status": record.status},
            code="idempotency_secret_withheld",
            status=409,
        )
    response = HttpResponse(
        bytes(record.body), status=record.status, content_type=record.content_type or None
    )
    response[REPLAYED_HEADER] = "true"
    return response


def _record(request: HttpRequest, pending: _Pending, response: HttpResponse) -> None:
    assert pending.owner is not None  # noqa: S101  # guard_operation checked it
    IdempotencyKey.objects.create(
        owner=pending.owner,
        key=pending.key,
        method=str(request.method),
        path=request.get_full_path(),
        fingerprint=pending.fingerprint,
        status=response.status_code,
        content_type="" if pending.withheld else response.get("Content-Type", ""),
        body=b"" if pending.withheld else response.content,
        withheld=pending.withheld,
    )


def _in_progress_response() -> JsonResponse:
    return JsonResponse(
        {
            "error": {
                "code": "idempotency_in_progress",
                "message": _("A request with this Idempotency-Key is still running; retry later."),
            }
        },
        status=409,
    )
