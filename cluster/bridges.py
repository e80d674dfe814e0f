"""API bridges: inside a sandbox (or through `cluster.outbound`), `http://<name>.bridge/<path>`
reaches an API with the credential the egress service adds (`cluster.egress`); the run never
holds it. A bridge is either registered by an application under its name (`BRIDGES`: the
providers, git — `missions.network`) or added by the owner (`cluster.models.ApiBridge`, its key
encrypted by the vault and read only here, at the moment of the request)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction

from agentos.core import audit, vault
from agentos.core.audit import Actor
from agentos.core.errors import DomainError
from agentos.core.models import AuditEvent
from agentos.core.registries import Registry
from cluster import proxy
from cluster.models import ApiBridge

MAX_SECRET = 4096


class BridgeError(DomainError):
    pass


@dataclass(frozen=True)
class Upstream:
    """Where a bridged request goes and what the bridge adds: `base_url` (scheme, host, optional
    port and path prefix), the credential `headers`, what one call costs (counted against the
    run's caps), and `refuse(method, path)`: why a request may not pass, or None."""

    base_url: str
    headers: dict[str, str]
    usd_micros_per_call: int = 0
    refuse: Callable[[str, str], str | None] | None = None


# (run id) -> Upstream, or raises LookupError with the reason (no key set...).
Bridge = Callable[[int], Upstream]
BRIDGES: Registry[Bridge] = Registry("bridge", name_pattern=r"[a-z][a-z0-9-]{0,30}")


class NoBridge(LookupError):
    pass


def upstream(run_id: int, name: str) -> Upstream:
    """The bridge `name` as the egress service applies it for `run_id`: a registered one, else
    the owner's. `NoBridge` when there is none; LookupError when its key cannot be had."""
    registered = BRIDGES.get(name)
    if registered is not None:
        return registered(run_id)
    bridge = ApiBridge.objects.filter(name=name).first()
    if bridge is None:
        raise NoBridge(f"no bridge named {name!r} (known: {names()})")
    try:
        secret = vault.decrypt(bytes(bridge.ciphertext))
    except vault.Unreadable:
        raise LookupError(f"the key of bridge {name!r} cannot be read (vault key lost?)") from None
    return Upstream(
        bridge.base_url,
        {bridge.header: bridge.template.replace("{secret}", secret)},
        bridge.usd_micros_per_call,
    )


def destination(name: str, found: Upstream, method: str, path: str) -> proxy.Destination:
    """Where a bridged request goes; `proxy.Refused` when the bridge refuses it."""
    parts = urlsplit(found.base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise proxy.Refused(
            503, f"bridge {name}: upstream {found.base_url!r} is not an http(s) URL"
        )
    why = found.refuse(method, path) if found.refuse is not None else None
    if why is not None:
        raise proxy.Refused(403, f"bridge {name}: {why}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    prefix = parts.path.rstrip("/")
    return proxy.Destination(
        parts.hostname,
        port,
        parts.scheme == "https",
        prefix + path,
        found.headers,
        name,
        found.usd_micros_per_call,
    )


def names() -> list[str]:
    """Every bridge a mission may name: the registered ones and the owner's."""
    return sorted({*BRIDGES.names(), *ApiBridge.objects.values_list("name", flat=True)})


def exists(name: str) -> bool:
    return name in BRIDGES.names() or ApiBridge.objects.filter(name=name).exists()


def put(
    name: str,
    *,
    base_url: str,
    secret: str | None,
    actor: Actor,
    header: str = "Authorization",
    template: str = "Bearer {secret}",
    usd_micros_per_call: int = 0,
) -> ApiBridge:
    """Add a bridge or change one (`secret` None keeps the stored one). Validated whole first:
    a bad field changes nothing."""
    if name in BRIDGES.names():
        raise BridgeError(f"{name!r} is a built-in bridge: choose another name.", status=409)
    known = ApiBridge.objects.filter(name=name).first()
    if known is None and not secret:
        raise BridgeError(f"A new bridge needs its secret (bridge {name!r}).")
    if secret is not None and (len(secret) > MAX_SECRET or not secret.strip()):
        raise BridgeError(f"A bridge's secret is 1 to {MAX_SECRET} characters.")
    if template.count("{secret}") != 1 or "{" in template.replace("{secret}", ""):
        raise BridgeError("The header template holds {secret} once, and no other braces.")
    if not header or any(c in header for c in ":\r\n ") or len(header) > 100:
        raise BridgeError(f"{header!r} is not an HTTP header name.")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise BridgeError("A bridge's base URL is http(s)://host[:port][/path], without a query.")
    bridge = known or ApiBridge(name=name)
    bridge.base_url = base_url
    bridge.header = header
    bridge.template = template
    bridge.usd_micros_per_call = usd_micros_per_call
    if secret is not None:
        bridge.ciphertext = vault.encrypt(secret.strip())
        bridge.hint = secret.strip()[-4:]
    try:
        bridge.full_clean(exclude=["ciphertext"])
    except ValidationError as error:
        raise BridgeError(
            "; ".join(f"{k}: {' '.join(v)}" for k, v in error.message_dict.items())
        ) from None
    with transaction.atomic():
        bridge.save()
        audit.record_by(
            AuditEvent.Kind.BRIDGE_CHANGED,
            actor,
            by=actor.by,
            bridge=name,
            change="added" if known is None else "changed",
            secret_changed=secret is not None,
        )
    return bridge


def remove(name: str, *, actor: Actor) -> None:
    with transaction.atomic():
        deleted, _ = ApiBridge.objects.filter(name=name).delete()
        if not deleted:
            raise BridgeError(f"No bridge named {name!r}.", code="not_found", status=404)
        audit.record_by(
            AuditEvent.Kind.BRIDGE_CHANGED, actor, by=actor.by, bridge=name, change="removed"
        )


def secrets() -> list[str]:
    """Every bridge's key, for the scrubber (never shown anywhere)."""
    found = []
    for ciphertext in ApiBridge.objects.values_list("ciphertext", flat=True):
        try:
            found.append(vault.decrypt(bytes(ciphertext)))
        except vault.Unreadable:
            continue
    return found


def describe(bridge: ApiBridge) -> dict[str, Any]:
    """A bridge as the owner sees it: never its key, only the key's last characters."""
    return {
        "name": bridge.name,
        "base_url": bridge.base_url,
        "header": bridge.header,
        "template": bridge.template,
        "hint": f"…{bridge.hint}" if bridge.hint else "",
        "usd_micros_per_call": bridge.usd_micros_per_call,
        "updated_at": bridge.updated_at.isoformat(),
    }
