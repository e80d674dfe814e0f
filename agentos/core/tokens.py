"""Personal API tokens: created by the owner, shown once, stored hashed, revocable; each with
an expiry (90 days unless chosen, at most a year) and scopes (`agentos.core.models.Scope`)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext as _

from agentos.core import audit, idempotency
from agentos.core.errors import DomainError
from agentos.core.models import ApiToken, AuditEvent, Scope, default_scopes
from agentos.core.owner import get_owner
from agentos.core.scopes import purpose

PREFIX = "aos_"
# last_used_at is rewritten at most this often, so a busy script does not write on every call.
LAST_USED_RESOLUTION = timedelta(minutes=1)
DEFAULT_DAYS = 90
MAX_DAYS = 365


class TokenRefused(DomainError):
    status = 401
    code = "invalid_token"


class TokenExpired(TokenRefused):
    code = "token_expired"


class ScopeMissing(DomainError):
    status = 403
    code = "insufficient_scope"
    scope: Scope | None = None  # the scope lacking, for the API's WWW-Authenticate challenge


@dataclass(frozen=True)
class NewToken:
    token: ApiToken
    secret: str  # the full token: shown to the owner once, never stored


def digest(secret: str) -> str:
    # A plain SHA-256 is enough: tokens carry 256 random bits, there is nothing to brute-force.
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(
    *,
    owner: User,
    name: str,
    scopes: Iterable[str] | None = None,
    days: int = DEFAULT_DAYS,
    address: str | None = None,
) -> NewToken:
    name = name.strip()
    if not name:
        raise DomainError(_("A token needs a name (what script uses it)."), code="invalid_input")
    if len(name) > 80:
        raise DomainError(_("A token name has at most 80 characters."), code="invalid_input")
    chosen = _valid_scopes(default_scopes() if scopes is None else list(scopes))
    if not 1 <= days <= MAX_DAYS:
        raise DomainError(
            _("A token lives between 1 and %(max)d days.") % {"max": MAX_DAYS},
            code="invalid_input",
        )
    secret = PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            owner=owner,
            name=name,
            prefix=secret[: len(PREFIX) + 6],
            digest=digest(secret),
            scopes=chosen,
            expires_at=timezone.now() + timedelta(days=days),
        )
        audit.record(
            AuditEvent.Kind.TOKEN_CREATED,
            username=owner.get_username(),
            address=address,
            token=token.pk,
            name=name,
            scopes=chosen,
            expires_at=token.expires_at.isoformat(),
        )
    return NewToken(token=token, secret=secret)


def _valid_scopes(scopes: list[str]) -> list[str]:
    for scope in scopes:
        if scope not in Scope.values:
            raise DomainError(
                _("Unknown scope '%(scope)s'; choose among %(known)s.")
                % {"scope": scope, "known": ", ".join(Scope.values)},
                code="invalid_input",
            )
    if not scopes:
        raise DomainError(_("A token needs at least one scope."), code="invalid_input")
    # In the declared order, each once: what the owner sees and what is checked are the same.
    return [scope for scope in Scope.values if scope in scopes]


def revoke_token(*, owner: User, token_id: int, address: str | None = None) -> ApiToken:
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(pk=token_id, owner=owner).first()
        if token is None:
            raise DomainError(_("No such API token."), code="not_found", status=404)
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            audit.record(
                AuditEvent.Kind.TOKEN_REVOKED,
                username=owner.get_username(),
                address=address,
                token=token.pk,
            )
    return token


def authenticate_token(secret: str, *, address: str | None = None) -> ApiToken:
    """The active token matching `secret`, with its last use recorded; else `TokenRefused`."""
    token = ApiToken.objects.select_related("owner").filter(digest=digest(secret.strip())).first()
    if token is None or not token.owner.is_active:
        audit.record(AuditEvent.Kind.TOKEN_REFUSED, address=address, reason="unknown")
        raise TokenRefused(_("Invalid API token."))
    # There is one owner: a token of any other account (made in the admin, or left by an owner
    # since replaced) opens nothing, whoever its user is.
    the_owner = get_owner()
    if the_owner is None or token.owner_id != the_owner.pk:
        audit.record(
            AuditEvent.Kind.TOKEN_REFUSED, address=address, reason="not_owner", token=token.pk
        )
        raise TokenRefused(_("Invalid API token."))
    if token.revoked_at is not None:
        audit.record(
            AuditEvent.Kind.TOKEN_REFUSED, address=address, reason="revoked", token=token.pk
        )
        raise TokenRefused(_("This API token was revoked."))
    now = timezone.now()
    if token.expires_at <= now:
        audit.record(
            AuditEvent.Kind.TOKEN_REFUSED, address=address, reason="expired", token=token.pk
        )
        raise TokenExpired(
            _("This API token expired on %(date)s; create a new one in Settings.")
            % {"date": token.expires_at.date().isoformat()}
        )
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        # Never wait for the row: a write under an Idempotency-Key authenticates inside its
        # transaction (agentos.core.idempotency) and holds this lock until it ends; a concurrent
        # request skips the update (another one just made it) instead of queueing behind it.
        with transaction.atomic():
            unlocked = ApiToken.objects.filter(pk=token.pk).select_for_update(skip_locked=True)
            ApiToken.objects.filter(pk__in=unlocked.values("pk")).update(last_used_at=now)
        token.last_used_at = now
    return token


def require_scope(request: HttpRequest, scope: Scope) -> None:
    """Refuse (403) a request made with a token that lacks `scope`; a verified console session
    has every scope (the owner signed in with both factors)."""
    token: ApiToken | None = getattr(request, "api_token", None)
    if token is None or scope in token.scopes:
        return
    idempotency.refused_in_view(
        request,
        lambda: audit.record_request(
            AuditEvent.Kind.TOKEN_REFUSED,
            request,
            reason="missing_scope",
            scope=scope.value,
            token=token.pk,
        ),
    )
    refusal = ScopeMissing(
        _(
            "This API token lacks the '%(scope)s' scope (needed to %(purpose)s); create a token "
            "with it in Settings."
        )
        % {"scope": scope.value, "purpose": purpose(scope)}
    )
    refusal.scope = scope
    raise refusal


def actor(request: HttpRequest) -> str:
    """Who acts, for the journal and the security log: the owner, or the token by its name."""
    return audit.Actor.of(request).by
