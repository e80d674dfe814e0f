"""The REST API at /api/v1: one NinjaAPI, owner authentication, and every error mapped here.

- Callers: a personal API token (`Authorization: Bearer aos_…`; the scope each route needs is
  the one rule of `agentos.core.scopes`: reads `read`, the owner's decisions `approve`, other
  writes `act`) or the owner's console session, signed in with the second factor and
  CSRF-checked.
- Every write is idempotent under an `Idempotency-Key` (`agentos.core.idempotency`, installed here
  around every operation, whichever router adds it).
- Error bodies always have the shape `{"error": {"code": ..., "message": ..., "details": ...}}`,
  whatever answered: a route, ninja, Django or a middleware (`json_errors` rewrites the rest);
  a service's `DomainError` keeps its own code and status.
- Routes of its own: health (no authentication), who is calling, and API tokens (from a console
  session only: a leaked token must not mint others). Each app's router, and the shell's event
  stream (`agentos.events`), is mounted at the end of this module by dotted path; `agentos.urls`
  mounts `api` at /api/v1 (docs/design.md §21).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase, StreamingHttpResponse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from ninja import Field, NinjaAPI, Router, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError, ValidationErrorContext
from ninja.security import APIKeyCookie, HttpBearer

from agentos import health
from agentos.core import audit, idempotency, owner, reachability, scopes, tokens
from agentos.core.errors import DomainError
from agentos.core.models import ApiToken, AuditEvent, Scope

logger = logging.getLogger(__name__)


class OwnerSession(APIKeyCookie):
    """The console's session: signed in with password and second factor, CSRF-checked."""

    param_name = settings.SESSION_COOKIE_NAME

    def _get_key(self, request: HttpRequest) -> str | None:
        # CSRF guards a signed-in browser only: a caller without the owner's session (a script
        # that forgot its token) is answered 401, not "CSRF check failed".
        if self.authenticate(request, None) is None:
            return None
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None) -> User | None:
        user = request.user
        return user if isinstance(user, User) and owner.is_verified_owner(user) else None


class OwnerToken(HttpBearer):
    """`Authorization: Bearer aos_…`, a personal API token."""

    def __call__(self, request: HttpRequest) -> User | None:
        # Re-implemented so a malformed header is never logged (HttpBearer logs it in DEBUG).
        scheme, _sep, secret = request.headers.get("Authorization", "").partition(" ")
        if not secret or scheme.lower() != "bearer":
            return None
        return self.authenticate(request, secret)

    def authenticate(self, request: HttpRequest, token: str) -> User:
        found = tokens.authenticate_token(token, address=audit.client_address(request))
        request.api_token = found  # type: ignore[attr-defined]
        # Checked here, before the body is read: a token without the scope learns nothing more.
        tokens.require_scope(
            request, scopes.needed(request.method, scopes.route_of(request, PREFIX))
        )
        return found.owner


class AgentosAPI(NinjaAPI):
    def validation_error_from_error_contexts(
        self, error_contexts: list[ValidationErrorContext[Any]]
    ) -> ValidationError:
        # A body read whole into one argument is located by ninja under that argument's name
        # (["body", "payload", "goal"]), a name that is nowhere in the request: drop it.
        error = super().validation_error_from_error_contexts(error_contexts)
        unseen = {
            getattr(context.model, "__read_from_single_attr__", None)
            for context in error_contexts
            if context.model.__ninja_param_source__ == "body"
        } - {None}
        for item in error.errors:
            loc = tuple(item.get("loc", ()))
            if len(loc) >= 2 and loc[0] == "body" and loc[1] in unseen:
                item["loc"] = (loc[0], *loc[2:])
        return error

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        # Writes take an optional Idempotency-Key header, applied to every operation below.
        return declare_scopes(idempotency.document(super().get_openapi_schema(**kwargs)))


def declare_scopes(schema: dict[str, Any]) -> dict[str, Any]:
    """Each operation's token requirement names the scope it needs (OpenAPI 3.1 lets a bearer
    scheme list roles), from the one rule that authentication applies."""
    for path, operations in schema.get("paths", {}).items():
        route = "/" + path.removeprefix(PREFIX).strip("/")
        for method, operation in operations.items():
            for requirement in operation.get("security", []):
                if "OwnerToken" in requirement:
                    requirement["OwnerToken"] = [scopes.needed(method, route).value]
    return schema


api = AgentosAPI(
    title="agentos",
    version="1",
    description="Missions, runs, approvals, memory and settings of a single-owner agentic OS.",
    urls_namespace="api-v1",
    # A bad bearer token raises and is answered at once; otherwise the session is tried.
    auth=[OwnerToken(), OwnerSession()],
)
# Every write, whichever router adds it, is idempotent under an Idempotency-Key (ninja's modes:
# "view" wraps the whole operation, "operation" the view function once authenticated).
api.add_decorator(idempotency.guard_operation, mode="view")
api.add_decorator(idempotency.guard_view, mode="operation")


PREFIX = "/api/v1/"  # where agentos.urls mounts `api`


def is_api_request(request: HttpRequest) -> bool:
    return request.path.startswith(PREFIX) or request.path == PREFIX.rstrip("/")


def error_response(
    request: HttpRequest,
    *,
    status: int,
    code: str,
    message: str,
    details: Any = None,
    challenge: str | None = None,
) -> HttpResponse:
    # Always the three keys, `details` null when there is nothing more to say: a client reads
    # every error the same way.
    body: dict[str, Any] = {"code": code, "message": message, "details": details}
    response = api.create_response(request, {"error": body}, status=status)
    if status == 401 or challenge:
        # RFC 6750: a 401 says how to authenticate; a refused token says why (`challenge`).
        response["WWW-Authenticate"] = f"Bearer {challenge}" if challenge else "Bearer"
    return response


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    422: "invalid_input",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
    507: "disk_full",
}

# While the database is away, how long a client should wait before asking again (the workers'
# backoff reaches 30 s; most outages are a restart of a few seconds).
RETRY_AFTER_SECONDS = 10


@dataclass(frozen=True)
class Trouble:
    """Why agentos cannot answer right now although nothing is wrong with the request."""

    status: int
    code: str
    heading: str
    message: str


def database_trouble(error: BaseException) -> Trouble | None:
    """The database is unreachable (503) or the disk is full (507); None for any other error.

    Shared by the API's handler and the console's pages (`agentos.errorpages`), so both say the
    same thing; the page never needs the database itself.
    """
    if reachability.is_disk_full(error):
        return Trouble(
            507,
            "disk_full",
            _("The disk is full"),
            _(
                "The disk is full: agentos or its database could not write (no space left on "
                "device). Nothing already saved is lost; new work is refused until space is "
                "freed on the disk that holds the data directory."
            ),
        )
    if reachability.is_unreachable(error):
        return Trouble(
            503,
            "database_unreachable",
            _("The database is unreachable"),
            _(
                "The database is unreachable: agentos can neither read nor save anything until "
                "PostgreSQL answers again. Nothing already saved is lost, and the workers resume "
                "the missions when it returns. Try again in a moment."
            ),
        )
    return None


def trouble_response(request: HttpRequest, trouble: Trouble) -> HttpResponse:
    response = error_response(
        request, status=trouble.status, code=trouble.code, message=trouble.message
    )
    if trouble.status == 503:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _unauthenticated_message() -> str:
    return _(
        "Sign in with your password and second factor, or send 'Authorization: Bearer <API token>'."
    )


def _status_message(request: HttpRequest, status: int) -> str:
    """What a script is told for an error no route explained (Django's or a middleware's)."""
    messages: dict[int, Callable[[], str]] = {
        400: lambda: _("The request is malformed."),
        401: _unauthenticated_message,
        403: lambda: _("This is not allowed."),
        404: lambda: _("No such API endpoint."),
        409: lambda: _("The request conflicts with the current state; read it again."),
        413: _body_too_large_message,
        422: lambda: _("The request does not match the schema."),
        429: lambda: _("Too many requests; retry later."),
        500: lambda: _("Internal error; it was logged. Retry later, or report it."),
        503: lambda: _("Unavailable for a moment; retry later."),
    }
    found = messages.get(status)
    return found() if found else HTTPStatus(status).phrase


def status_error(request: HttpRequest, status: int) -> HttpResponse:
    """The API's JSON error for a bare status (the site's error handlers use it)."""
    if status == 413:
        return body_too_large(request)
    return error_response(
        request,
        status=status,
        code=_HTTP_CODES.get(status, "error"),
        message=_status_message(request, status),
    )


def body_limit() -> str:
    """DATA_UPLOAD_MAX_MEMORY_SIZE in words: "2.5 MB (2621440 bytes)"."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0
    size = f"{limit / 2**20:.1f} MB" if limit >= 2**20 else f"{limit / 2**10:.1f} KB"
    return f"{size} ({limit} bytes)"


def _body_too_large_message() -> str:
    return _("The request body is larger than the limit of %(limit)s.") % {"limit": body_limit()}


def body_too_large(request: HttpRequest) -> HttpResponse:
    return error_response(
        request,
        status=413,
        code="body_too_large",
        message=_body_too_large_message(),
        details={"limit_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE},
    )


def _not_allowed(request: HttpRequest, response: HttpResponseBase) -> HttpResponse:
    allowed = sorted(m.strip() for m in response.get("Allow", "").split(",") if m.strip())
    answer = error_response(
        request,
        status=405,
        code="method_not_allowed",
        message=_("%(method)s is not allowed here; use %(allowed)s.")
        % {"method": request.method, "allowed": _(" or ").join(allowed)},
        details={"allowed": allowed},
    )
    answer["Allow"] = ", ".join(allowed)
    return answer


@functools.cache
def _public_routes() -> frozenset[str]:
    """Routes whose every operation takes no authentication (health), from the OpenAPI document:
    the operations that declare no security requirement."""
    return frozenset(
        "/" + path.removeprefix(PREFIX).strip("/")
        for path, operations in api.get_openapi_schema()["paths"].items()
        if not any(operation.get("security") for operation in operations.values())
    )


def _unless_public(request: HttpRequest) -> HttpResponse | None:
    """The 401 (or the token's refusal) for a caller who is not the owner on a private route;
    None for the owner, on a public route, or where no route matched."""
    if request.resolver_match is None or scopes.route_of(request, PREFIX) in _public_routes():
        return None
    scheme, _sep, secret = request.headers.get("Authorization", "").partition(" ")
    if secret and scheme.lower() == "bearer":
        try:
            tokens.authenticate_token(secret, address=audit.client_address(request))
        except DomainError as refused:
            return _domain_error(request, refused)
        return None
    if OwnerSession().authenticate(request, None) is not None:
        return None
    return _unauthenticated(request, AuthenticationError())


# Headers of the original answer that still mean something on its JSON replacement.
_KEPT_HEADERS = ("WWW-Authenticate", "Retry-After")


def json_errors(
    get_response: Callable[[HttpRequest], HttpResponseBase],
) -> Callable[[HttpRequest], HttpResponseBase]:
    """Middleware: any error under /api/v1 that is not JSON yet (ninja's 405, Django's pages,
    another middleware's refusal) is rewritten to the API's error shape, status kept."""

    def middleware(request: HttpRequest) -> HttpResponseBase:
        response = get_response(request)
        if (
            response.status_code < 400
            or not is_api_request(request)
            or isinstance(response, StreamingHttpResponse)
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        if response.status_code == 405:
            # Who calls is asked before what: a stranger learns no method of a private route.
            return _unless_public(request) or _not_allowed(request, response)
        answer = status_error(request, response.status_code)
        for header in _KEPT_HEADERS:
            if header in response:
                answer[header] = response[header]
        return answer

    return middleware


@api.exception_handler(DomainError)
def _domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
    challenge = None
    if isinstance(exc, tokens.TokenRefused):
        challenge = 'error="invalid_token"'
    elif isinstance(exc, tokens.ScopeMissing) and exc.scope is not None:
        challenge = f'error="insufficient_scope", scope="{exc.scope.value}"'
    return error_response(
        request,
        status=exc.status,
        code=exc.code,
        message=exc.message,
        details=exc.details,
        challenge=challenge,
    )


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    audit.record_request(AuditEvent.Kind.API_UNAUTHENTICATED, request, method=request.method)
    return error_response(
        request, status=401, code="unauthenticated", message=_unauthenticated_message()
    )


@api.exception_handler(RequestDataTooBig)
def _body_too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # Django raises it reading a body over DATA_UPLOAD_MAX_MEMORY_SIZE; nothing was parsed.
    return body_too_large(request)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    code = _HTTP_CODES.get(exc.status_code, "error")
    message = str(exc)
    if message.startswith("Cannot parse request body"):
        code, message = "malformed_json", _("The request body is not valid JSON.")
        audit.record_request(AuditEvent.Kind.API_BAD_INPUT, request, reason=code)
    elif message == "CSRF check Failed":
        code, message = "csrf_failed", _("CSRF check failed: send the X-CSRFToken header.")
    return error_response(request, status=exc.status_code, code=code, message=message)


@api.exception_handler(ValidationError)
def _invalid_input(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    audit.record_request(AuditEvent.Kind.API_BAD_INPUT, request, reason="invalid_input")
    return error_response(
        request,
        status=422,
        code="invalid_input",
        message=_("The request does not match the schema; see details."),
        details=exc.errors,
    )


@api.exception_handler(DataError)
def _unstorable_input(request: HttpRequest, exc: DataError) -> HttpResponse:
    # The last line of defence: a value the database refuses (out of range, NUL in text) that no
    # schema caught. Its statement failed, so nothing was written; the gap is logged to close.
    logger.warning(
        "API input refused by the database on %s %s: %s", request.method, request.path, exc
    )
    audit.record_request(AuditEvent.Kind.API_BAD_INPUT, request, reason="unstorable")
    return error_response(
        request,
        status=422,
        code="invalid_input",
        message=_("A value cannot be stored (out of range, or a NUL character)."),
    )


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(request, status=404, code="not_found", message=_("Not found."))


@api.exception_handler(Exception)
def _internal_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    if (trouble := database_trouble(exc)) is not None:
        # Not our bug: the outage is logged once by the workers, the disk full on each refusal.
        logger.warning("API %s %s: %s: %s", request.method, request.path, trouble.code, exc)
        return trouble_response(request, trouble)
    # Scripts get JSON even when we fail; the traceback goes to the log, never to the client.
    logger.exception("API error on %s %s", request.method, request.path)
    return error_response(
        request,
        status=500,
        code="internal_error",
        message=_("Internal error; it was logged. Retry later, or report it."),
    )


@csrf_exempt  # it changes nothing; a JSON 404 beats an HTML CSRF page for a mistyped path
def unknown_endpoint(request: HttpRequest, rest: str) -> HttpResponse:
    """JSON 404 for paths under /api/v1/ that no route matches (Django would answer HTML)."""
    return error_response(request, status=404, code="not_found", message=_("No such API endpoint."))


def caller(request: HttpRequest) -> User:
    """The owner that ninja's authentication attached to the request."""
    user = getattr(request, "auth", None)
    if not isinstance(user, User):
        raise AuthenticationError()
    return user


# --- Health ------------------------------------------------------------------------------------


class ComponentOut(Schema):
    state: Literal["up", "down", "stale", "unknown", "applied", "pending"]
    detail: str
    since: datetime | None


class HealthOut(Schema):
    status: Literal["ok", "degraded"]
    checked_at: datetime
    database: ComponentOut
    migrations: ComponentOut
    workers: ComponentOut


@api.get(
    "/health",
    auth=None,
    response={200: HealthOut, 503: HealthOut},
    summary="Database, migrations and worker pool state (no authentication)",
    tags=["system"],
)
def get_health(request: HttpRequest) -> Status[dict[str, Any]]:
    report = health.check()
    body = {
        "status": "ok" if report.ok else "degraded",
        "checked_at": report.checked_at,
        "database": report.database,
        "migrations": report.migrations,
        "workers": report.workers,
    }
    return Status(200 if report.ok else 503, body)


# --- Owner and tokens ---------------------------------------------------------------------------

account = Router(tags=["account"])


class MeOut(Schema):
    username: str
    via: Literal["session", "token"]
    token_name: str | None = None


class TokenIn(Schema):
    name: str
    # `approve` only when asked for; the default is what a script usually needs.
    scopes: list[Scope] = Field(default_factory=lambda: [Scope.READ, Scope.ACT])
    days: int = Field(tokens.DEFAULT_DAYS, ge=1, le=tokens.MAX_DAYS)


class TokenOut(Schema):
    id: int
    name: str
    prefix: str
    scopes: list[Scope]
    created_at: datetime
    expires_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class NewTokenOut(TokenOut):
    token: str


@account.get("/me", response=MeOut, summary="Who is calling")
def get_me(request: HttpRequest) -> dict[str, Any]:
    token: ApiToken | None = getattr(request, "api_token", None)
    return {
        "username": caller(request).get_username(),
        "via": "token" if token else "session",
        "token_name": token.name if token else None,
    }


# Tokens are managed from a verified console session only: a leaked token must not mint others.
@account.get("/tokens", response=list[TokenOut], auth=OwnerSession(), summary="List API tokens")
def list_tokens(request: HttpRequest) -> list[ApiToken]:
    return list(ApiToken.objects.filter(owner=caller(request)))


@account.post(
    "/tokens",
    response={201: NewTokenOut},
    auth=OwnerSession(),
    summary="Create an API token (its secret is returned once)",
)
@idempotency.withholds_secret
def create_token(request: HttpRequest, payload: TokenIn) -> Status[dict[str, Any]]:
    new = tokens.create_token(
        owner=caller(request),
        name=payload.name,
        scopes=payload.scopes,
        days=payload.days,
        address=audit.client_address(request),
    )
    return Status(201, {**TokenOut.model_validate(new.token).model_dump(), "token": new.secret})


@account.post(
    "/tokens/{token_id}/revoke", response=TokenOut, auth=OwnerSession(), summary="Revoke a token"
)
def revoke_token(request: HttpRequest, token_id: int) -> ApiToken:
    return tokens.revoke_token(
        owner=caller(request),
        token_id=token_id,
        address=audit.client_address(request),
    )


api.add_router("/", account)
api.add_router("/", "approvals.api.router")
api.add_router("/", "missions.api.router")
api.add_router("/", "missions.api_projects.router")
api.add_router("/", "missions.api_runs.router")
api.add_router("/", "missions.api_budget.router")
api.add_router("/", "memory.api.router")
api.add_router("/", "cluster.api.router")
api.add_router("/", "missions.api_skills.router")
api.add_router("/", "missions.api_schedules.router")
api.add_router("/events", "agentos.events.router")
api.add_router("/", "missions.killswitch.router")
api.add_router("/", "tools.mcp.api.router")
api.add_router("/", "missions.api_webhooks.router")
api.add_router("/", "missions.api_profiles.router")
