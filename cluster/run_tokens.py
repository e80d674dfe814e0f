"""Per-run tokens: the one credential-like thing a sandbox holds, good only on its own run's egress
socket, only for its scopes, only until it expires, and only while the run's tree is not stopped
(the egress service checks that last part in the database).

A token is `aosr1.<claims>.<signature>`: base64url JSON claims (`run`, `root`, `scopes`, `exp`
in unix seconds, `gen`) and their HMAC-SHA256. The signing key is random, kept vault-encrypted in
`DATA_DIR/run-tokens.key` (0600) with its generation, never in the settings. `revoke_all()` (the
kill switch) replaces it with a new key of the next generation: every token signed before dies,
and is told apart from a forged one by its older generation.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from agentos.core import private, vault

logger = logging.getLogger(__name__)

PREFIX = "aosr1"
_TOKEN = re.compile(rf"{PREFIX}\.[A-Za-z0-9_.=-]*")
FILE_NAME = "run-tokens.key"
MAX_SECONDS = 24 * 3600
# `outbound`: a request of the control plane itself (`cluster.outbound`), which the harness
# judged before the call, not of a sandbox.
OUTBOUND = "outbound"
_SCOPE = re.compile(r"egress|outbound|bridge:[a-z][a-z0-9-]{0,30}")


class TokenRefused(Exception):
    """A token that opens nothing. `status` is the proxy's answer: 407 when the token itself is
    bad (missing, malformed, forged, expired, revoked), 403 when it is good but not for this."""

    def __init__(self, message: str, *, status: int = 407) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Claims:
    run: int
    root: int
    scopes: tuple[str, ...]
    expires_at: int  # unix seconds
    generation: int


def mint(*, run_id: int, root_id: int, scopes: list[str], seconds: int) -> str:
    """A token for `run_id` (of the tree rooted at `root_id`) valid `seconds` from now."""
    if run_id < 1 or root_id < 1:
        raise ValueError(f"run ids are positive: run {run_id}, root {root_id}")
    if not 1 <= seconds <= MAX_SECONDS:
        raise ValueError(f"a run token lives 1 to {MAX_SECONDS} seconds, not {seconds}")
    unknown = sorted(scope for scope in scopes if not _SCOPE.fullmatch(scope))
    if unknown or not scopes:
        raise ValueError(
            f"unknown run token scopes {unknown}: scopes are egress, outbound, bridge:<name>"
            if unknown
            else "a run token needs at least one scope"
        )
    generation, key = _key()
    claims = {
        "run": run_id,
        "root": root_id,
        "scopes": sorted(set(scopes)),
        "exp": int(time.time()) + seconds,
        "gen": generation,
    }
    body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    return f"{PREFIX}.{body}.{_b64(_sign(key, body))}"


def verify(token: str, *, run_id: int, scope: str) -> Claims:
    """The claims of a token presented on `run_id`'s socket for `scope`; `TokenRefused` unless it
    is ours, intact, current, unexpired, of that run and with that scope."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise TokenRefused("not a run token (expected aosr1.<claims>.<signature>)")
    body, signature = parts[1], parts[2]
    try:
        raw = json.loads(_unb64(body))
        claims = Claims(
            run=int(raw["run"]),
            root=int(raw["root"]),
            scopes=tuple(str(s) for s in raw["scopes"]),
            expires_at=int(raw["exp"]),
            generation=int(raw["gen"]),
        )
        given = _unb64(signature)
    except (ValueError, KeyError, TypeError):
        raise TokenRefused("malformed run token") from None
    generation, key = _key()
    if not hmac.compare_digest(given, _sign(key, body)):
        if claims.generation < generation:
            raise TokenRefused("run token revoked (every token was revoked by the kill switch)")
        raise TokenRefused("run token signature does not match (altered, or not ours)")
    if claims.expires_at <= time.time():
        raise TokenRefused(f"run token expired at {claims.expires_at} (unix time)")
    if claims.run != run_id:
        raise TokenRefused(
            f"this token belongs to run {claims.run}, not to run {run_id} whose socket this is",
            status=403,
        )
    if scope not in claims.scopes:
        raise TokenRefused(
            f"run token lacks the scope {scope!r} (it has {', '.join(claims.scopes)})", status=403
        )
    return claims


def revoke_all() -> int:
    """Kill every outstanding token (the kill switch): a new signing key of the next generation.
    Returns that generation."""
    with _lock:
        generation = _read()[0] if key_file().exists() else 0
        _write(generation + 1)
        _cache.clear()
        return generation + 1


def key_file() -> Path:
    return Path(settings.DATA_DIR) / FILE_NAME


# (device, inode, mtime) of the key file -> (generation, key): one decryption per key change.
_cache: dict[tuple[int, int, int], tuple[int, bytes]] = {}
_lock = threading.Lock()


def _key() -> tuple[int, bytes]:
    path = key_file()
    with _lock:
        if not path.exists():
            # The first process wins the link; the others read its key (see private.create).
            private.create(path, _sealed(1, secrets.token_bytes(32)))
        info = path.lstat()
        stamp = (info.st_dev, info.st_ino, info.st_mtime_ns)
        if stamp not in _cache:
            _cache.clear()
            _cache[stamp] = _read()
        return _cache[stamp]


def _read() -> tuple[int, bytes]:
    try:
        sealed = json.loads(vault.decrypt(private.read(key_file()).strip().encode()))
        return int(sealed["generation"]), base64.b64decode(sealed["key"])
    except (vault.Unreadable, ValueError, KeyError) as error:
        # Sealed by a vault key since dropped, or damaged: a new key costs only the tokens out
        # now (minutes long), which it kills as the kill switch would.
        logger.warning("the run token key in %s cannot be read (%s): made anew", key_file(), error)
        _write(1)
        sealed = json.loads(vault.decrypt(private.read(key_file()).strip().encode()))
        return int(sealed["generation"]), base64.b64decode(sealed["key"])


def _write(generation: int) -> None:
    private.replace(key_file(), _sealed(generation, secrets.token_bytes(32)))


def _sealed(generation: int, key: bytes) -> str:
    plain = json.dumps({"generation": generation, "key": base64.b64encode(key).decode()})
    return vault.encrypt(plain).decode() + "\n"


def _sign(key: bytes, body: str) -> bytes:
    return hmac.new(key, f"{PREFIX}.{body}".encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not text or any(c not in _ALPHABET for c in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def scrub(text: str) -> str:
    """`text` without any run token, even one a sandbox wrote in a URL: never journaled."""
    return _TOKEN.sub(f"{PREFIX}.[token]", text)
