"""The vault: secrets at rest (provider keys, repository credentials) encrypted with keys that
are not Django's `SECRET_KEY`.

Keys are Fernet keys, the first one primary (it encrypts; every one decrypts):
- `AGENTOS_VAULT_KEYS`, comma-separated, when set: the keys then live outside the data dir, so
  a copy of the data dir (database and all) decrypts nothing;
- else the key file `DATA_DIR/vault.keys`, one key a line, created 0600 and refused when it is
  a symlink, not ours, or readable by others (`agentos.core.private`).

Rotating the secret key loses nothing here. `rotate()` puts a new primary key first and keeps
the old ones; `reencrypt()` rewrites every registered field with the primary key (both are run
by `manage.py vault_rotate`). A field is registered from its app's `ready()`, by model label:
`VAULT_FIELDS.add("tools.RemoteCredential", "ciphertext")`.

Keys are read from their source on each call, never cached: after a rotation in another process
this one encrypts with the new primary key at once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction

from agentos.core import private
from agentos.core.registries import Registry

ENV = "AGENTOS_VAULT_KEYS"
FILE_NAME = "vault.keys"
# Serialises rotations and re-encryptions across processes (pg_advisory_xact_lock's key space
# is shared by the whole database: this number is ours).
_LOCK = 0x61676E7473_7661


class Unreadable(Exception):
    """A ciphertext that no known key opens (made with a key since lost, or not ours)."""


# app_label.ModelName -> its BinaryField holding `encrypt()`'s output, re-encrypted by
# `reencrypt()` (every such model has one).
VAULT_FIELDS: Registry[str] = Registry("vault field")


def encrypt(plaintext: str) -> bytes:
    """A Fernet token of `plaintext` under the primary key."""
    return Fernet(_keys()[0]).encrypt(plaintext.encode())


def decrypt(ciphertext: bytes) -> str:
    """The plaintext, trying every known key; `Unreadable` when none opens it."""
    try:
        return _multi().decrypt(bytes(ciphertext)).decode()
    except InvalidToken:
        raise Unreadable("no vault key opens this secret") from None


def keys_from_environment() -> bool:
    return bool(os.environ.get(ENV, "").strip())


def rotate() -> None:
    """Make a new primary key; the previous ones stay, for what they encrypted."""
    if keys_from_environment():
        raise ImproperlyConfigured(
            f"The vault keys come from {ENV}: put a new key first in it (make one with "
            "`python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key()"
            ".decode())'`), keep the old ones after it, restart, then re-encrypt."
        )
    with transaction.atomic():
        _lock()
        current = _file_keys()
        private.replace(key_file(), _lines([Fernet.generate_key(), *current]))


@dataclass
class Reencrypted:
    rewritten: int = 0
    # "app_label.Model pk=…" of each secret no key opens: left as it is, for the owner to set again.
    unreadable: list[str] = field(default_factory=list)


def reencrypt() -> Reencrypted:
    """Rewrite every registered field under the primary key, in one transaction."""
    report = Reencrypted()
    with transaction.atomic():
        _lock()
        multi = _multi()
        for label, name in VAULT_FIELDS.items():
            model = apps.get_model(label)
            rows = model._default_manager.select_for_update().values_list("pk", name)
            for pk, ciphertext in rows:
                if ciphertext is None:
                    continue
                try:
                    fresh = multi.rotate(bytes(ciphertext))
                except InvalidToken:
                    report.unreadable.append(f"{label} pk={pk}")
                    continue
                model._default_manager.filter(pk=pk).update(**{name: fresh})
                report.rewritten += 1
    return report


def ensure() -> None:
    """Make the key file when there is none yet (the first secret written would): for a caller
    that hands the keys to other processes before anything is encrypted."""
    _keys()


def check() -> None:
    """Raise `ImproperlyConfigured` if the keys in use are unusable; creates nothing."""
    if keys_from_environment():
        _keys()
    elif key_file().exists() or key_file().is_symlink():
        _parse(private.read(key_file()).splitlines(), source=str(key_file()))


def key_file() -> Path:
    return Path(settings.DATA_DIR) / FILE_NAME


def _lock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])


def _multi() -> MultiFernet:
    return MultiFernet([Fernet(key) for key in _keys()])


def _keys() -> list[bytes]:
    raw = os.environ.get(ENV, "").strip()
    if raw:
        return _parse([item.strip() for item in raw.split(",")], source=ENV)
    return _file_keys()


def _file_keys() -> list[bytes]:
    path = key_file()
    # The first process to need a key makes the file; one made concurrently wins (see private).
    private.create(path, _lines([Fernet.generate_key()]))
    return _parse(private.read(path).splitlines(), source=str(path))


def _parse(items: list[str], *, source: str) -> list[bytes]:
    keys = [item.strip().encode() for item in items if item.strip()]
    if not keys:
        raise ImproperlyConfigured(f"{source} holds no vault key.")
    for number, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except ValueError:
            raise ImproperlyConfigured(
                f"Vault key {number} in {source} is not a Fernet key (32 bytes, url-safe base64)."
            ) from None
    return keys


def _lines(keys: list[bytes]) -> str:
    return "".join(f"{key.decode()}\n" for key in keys)
