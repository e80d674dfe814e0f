"""Credentials for a project's remotes: kept in the control plane, encrypted by the vault, used
only by the host's git on the staging repository (push, ls-remote, fetch) — never in a sandbox,
a prompt, a log or an artifact.

A token goes to git as an HTTP header scoped to the remote's URL, through git's environment
configuration (`GIT_CONFIG_COUNT`...): no argv shows it to other users of the machine and no
file holds it. An SSH key is written for the call's duration to a root-only file.
"""

from __future__ import annotations

import base64
import contextlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agentos.core import vault
from tools.errors import ToolConfigError
from tools.models import CredentialKind, RemoteCredential

URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.IGNORECASE)
REMOTE_URL = re.compile(r"(?:https?|ssh)://[A-Za-z0-9._~%@\[\]:-]+(?:/\S*)?", re.IGNORECASE)
SCP_LIKE = re.compile(r"[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:(?!/?-)[^\s:]\S*")
URL_PASSWORD = re.compile(r"[a-z]+://[^/@]*:[^/@]*@", re.IGNORECASE)  # user:secret@host
TOKEN_USER = "x-access-token"  # noqa: S105  # a user name GitHub, GitLab and Gitea accept


@dataclass(frozen=True)
class Auth:
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()

    def scrub(self, text: str) -> str:
        return scrub(text, self.secrets)


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` without the given secrets nor any credentials written into a URL."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[secret]")
    return URL_USERINFO.sub(r"\g<scheme>[credentials]@", text)


@contextlib.contextmanager
def credentials(project_id: int | None, remote: str, url: str) -> Iterator[Auth]:
    """What host git needs in its environment to reach `remote` of the project (nothing when
    the project keeps no credential for it)."""
    stored = (
        RemoteCredential.objects.filter(project_id=project_id, remote=remote).first()
        if project_id is not None
        else None
    )
    if stored is None:
        yield Auth()
        return
    try:
        secret = vault.decrypt(bytes(stored.ciphertext))
    except vault.Unreadable:
        raise ToolConfigError(
            f"The credential for remote {remote!r} cannot be decrypted with the vault's keys;"
            " set it again in the admin.",
            code="credential_unreadable",
        ) from None
    with given(kind=stored.kind, secret=secret, username=stored.username, url=url) as auth:
        yield auth


@contextlib.contextmanager
def given(*, kind: str, secret: str, username: str, url: str) -> Iterator[Auth]:
    """What host git needs in its environment to reach `url` with a credential in hand (a
    project's clone, before the credential is stored with the project)."""
    if kind == CredentialKind.TOKEN:
        basic = base64.b64encode(f"{username or TOKEN_USER}:{secret}".encode()).decode()
        header = f"Authorization: Basic {basic}"
        yield Auth(
            env={
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": f"http.{url}.extraHeader",
                "GIT_CONFIG_VALUE_0": header,
            },
            secrets=(secret, basic),
        )
        return
    folder = Path(tempfile.mkdtemp(prefix="agentos-ssh-"))  # 0700, ours
    try:
        key = folder / "key"
        key.touch(mode=0o600)
        key.write_text(secret.strip() + "\n")
        command = (
            f"ssh -i {key} -o IdentitiesOnly=yes -o BatchMode=yes -F /dev/null"
            " -o StrictHostKeyChecking=accept-new"
        )
        yield Auth(env={"GIT_SSH_COMMAND": command}, secrets=(secret,))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_url(url: str) -> str:
    """`url` if it names a remote repository git may clone from the host: HTTPS, HTTP, SSH or
    the scp-like `user@host:path`. Never a local path, `file://`, `ext::` (runs a command) or
    anything git could take for an option."""
    url = url.strip()
    if not url or len(url) > 500 or any(c.isspace() or ord(c) < 32 for c in url):
        raise ToolConfigError(
            "A clone URL is 1 to 500 characters without spaces.", code="invalid_input"
        )
    hidden_option = url.startswith("-") or "@-" in url or "://-" in url
    if hidden_option or not (REMOTE_URL.fullmatch(url) or SCP_LIKE.fullmatch(url)):
        raise ToolConfigError(
            f"{url!r} is not a remote repository's URL: give https://host/path,"
            " ssh://user@host/path or user@host:path.",
            code="invalid_input",
        )
    if URL_PASSWORD.match(url):
        raise ToolConfigError(
            "Put no password or token in the clone URL: give it as the credential, which is kept"
            " encrypted (the URL is shown on the project's page).",
            code="invalid_input",
        )
    return url


def values() -> list[str]:
    """Every stored credential, for the scrubber (never shown anywhere)."""
    found = []
    for stored in RemoteCredential.objects.all():
        try:
            found.append(vault.decrypt(bytes(stored.ciphertext)))
        except vault.Unreadable:
            continue
    return found


def put(*, project_id: int, remote: str, kind: str, secret: str, username: str = "") -> None:
    """Store (or replace) the credential of a project's remote, encrypted."""
    secret = secret.strip()
    if kind not in CredentialKind.values:
        raise ToolConfigError(f"Unknown credential kind {kind!r}.", code="invalid_input")
    if not secret or len(secret) > 20_000:
        raise ToolConfigError("A credential is 1 to 20,000 characters.", code="invalid_input")
    RemoteCredential.objects.update_or_create(
        project_id=project_id,
        remote=remote,
        defaults={
            "kind": kind,
            "username": username or (TOKEN_USER if kind == CredentialKind.TOKEN else ""),
            "ciphertext": vault.encrypt(secret),
            "hint": secret[-4:] if kind == CredentialKind.TOKEN else "",
        },
    )
