"""The vault: keys apart from SECRET_KEY, 0600 from creation, rotation keeping old keys."""

from __future__ import annotations

import base64
import hashlib
import importlib
import os
import stat
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import override_settings

from agentos.core import private, vault
from missions import keys
from missions.models import ProviderKey

KEY = "sk-ant-0123456789abcdef"


@pytest.fixture(autouse=True)
def own_vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test its own key file (and no keys from the environment)."""
    monkeypatch.delenv(vault.ENV, raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with override_settings(DATA_DIR=tmp_path):
        yield tmp_path


def file_keys() -> list[str]:
    return vault.key_file().read_text().split()


def test_it_encrypts_with_a_key_file_made_0600(own_vault: Path) -> None:
    old = os.umask(0o022)
    try:
        secret = vault.encrypt("hunter2")
    finally:
        os.umask(old)

    assert stat.S_IMODE((own_vault / "vault.keys").stat().st_mode) == 0o600
    assert b"hunter2" not in secret
    assert vault.decrypt(secret) == "hunter2"
    assert Fernet(file_keys()[0].encode()).decrypt(secret) == b"hunter2"


def test_it_does_not_depend_on_the_secret_key() -> None:
    secret = vault.encrypt("hunter2")

    with override_settings(SECRET_KEY="another secret key, after a rotation"):
        assert vault.decrypt(secret) == "hunter2"


def test_it_takes_its_keys_from_the_environment_first_one_primary(
    monkeypatch: pytest.MonkeyPatch, own_vault: Path
) -> None:
    primary, older = Fernet.generate_key(), Fernet.generate_key()
    made_with_older = Fernet(older).encrypt(b"old secret")
    monkeypatch.setenv(vault.ENV, f"{primary.decode()}, {older.decode()}")

    secret = vault.encrypt("new secret")

    assert Fernet(primary).decrypt(secret) == b"new secret"
    assert vault.decrypt(made_with_older) == "old secret"
    assert not (own_vault / "vault.keys").exists()  # nothing written next to the data
    with pytest.raises(ImproperlyConfigured, match="put a new key first"):
        vault.rotate()


def test_it_refuses_a_malformed_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(vault.ENV, f"{Fernet.generate_key().decode()},not-a-key")

    with pytest.raises(ImproperlyConfigured, match="Vault key 2 in AGENTOS_VAULT_KEYS"):
        vault.encrypt("x")


def test_it_says_when_no_key_opens_a_secret() -> None:
    foreign = Fernet(Fernet.generate_key()).encrypt(b"theirs")

    for ciphertext in (foreign, b"garbage"):
        with pytest.raises(vault.Unreadable):
            vault.decrypt(ciphertext)


def test_it_refuses_a_key_file_others_can_read(own_vault: Path) -> None:
    vault.encrypt("x")
    (own_vault / "vault.keys").chmod(0o640)

    with pytest.raises(private.Unsafe, match="mode 0640"):
        vault.encrypt("y")


@pytest.mark.django_db
def test_it_rotates_keeping_the_old_keys_for_decryption() -> None:
    before = vault.encrypt("made before")
    [old_key] = file_keys()

    vault.rotate()

    new_key, kept = file_keys()
    assert kept == old_key
    assert vault.decrypt(before) == "made before"
    after = vault.encrypt("made after")
    assert Fernet(new_key.encode()).decrypt(after) == b"made after"
    assert stat.S_IMODE(vault.key_file().stat().st_mode) == 0o600


@pytest.mark.django_db
def test_it_reencrypts_every_registered_secret_and_reports_the_unreadable() -> None:
    keys.put("anthropic", KEY)
    lost = Fernet(Fernet.generate_key()).encrypt(b"sk-lost-key-0000")
    ProviderKey.objects.create(provider="openai", ciphertext=lost, hint="0000")
    vault.rotate()
    primary = Fernet(file_keys()[0].encode())

    report = vault.reencrypt()

    stored = ProviderKey.objects.get(provider="anthropic")
    assert primary.decrypt(bytes(stored.ciphertext)) == KEY.encode()
    openai = ProviderKey.objects.get(provider="openai")
    assert report.rewritten == 1
    assert report.unreadable == [f"missions.ProviderKey pk={openai.pk}"]
    assert bytes(openai.ciphertext) == lost  # kept for the owner to see, never dropped


def test_it_registers_a_field_once() -> None:
    before = vault.VAULT_FIELDS.items()

    vault.VAULT_FIELDS.add("missions.ProviderKey", "ciphertext")

    assert vault.VAULT_FIELDS.items() == before
    assert ("missions.ProviderKey", "ciphertext") in before


@pytest.mark.django_db
def test_vault_rotate_adds_a_key_and_reencrypts() -> None:
    keys.put("anthropic", KEY)
    out = StringIO()

    call_command("vault_rotate", stdout=out)

    assert len(file_keys()) == 2
    assert (
        Fernet(file_keys()[0].encode()).decrypt(bytes(ProviderKey.objects.get().ciphertext))
        == KEY.encode()
    )
    assert "1 secret re-encrypted" in out.getvalue()


@pytest.mark.django_db
def test_vault_rotate_fails_loudly_on_a_secret_it_cannot_read() -> None:
    ProviderKey.objects.create(
        provider="openai", ciphertext=Fernet(Fernet.generate_key()).encrypt(b"x" * 10), hint="x"
    )

    with pytest.raises(CommandError, match=r"missions\.ProviderKey pk="):
        call_command("vault_rotate", stdout=StringIO())


# --- provider keys: in the vault, never silently lost --------------------------------------------


@pytest.mark.django_db
def test_provider_keys_are_stored_in_the_vault() -> None:
    keys.put("anthropic", KEY)

    stored = bytes(ProviderKey.objects.get().ciphertext)

    assert vault.decrypt(stored) == KEY
    assert keys.get("anthropic") == KEY


@pytest.mark.django_db
def test_an_unreadable_provider_key_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    ProviderKey.objects.create(
        provider="anthropic", ciphertext=Fernet(Fernet.generate_key()).encrypt(b"k" * 10), hint="k"
    )

    assert keys.get("anthropic") is None

    assert "no vault key opens the stored anthropic key" in caplog.text
    assert ProviderKey.objects.filter(provider="anthropic").exists()


def legacy_ciphertext(secret_key: str, plaintext: str) -> bytes:
    """What the previous release stored: Fernet under a key derived from SECRET_KEY."""
    digest = hashlib.sha256(b"agentos provider keys:" + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest)).encrypt(plaintext.encode())


@pytest.mark.django_db
def test_the_migration_moves_old_provider_keys_into_the_vault(
    settings: object, caplog: pytest.LogCaptureFixture
) -> None:
    secret_key = str(settings.SECRET_KEY)  # type: ignore[attr-defined]
    ProviderKey.objects.create(
        provider="anthropic", ciphertext=legacy_ciphertext(secret_key, KEY), hint="cdef"
    )
    lost = legacy_ciphertext("a secret key since replaced", "sk-openai-lost")
    ProviderKey.objects.create(provider="openai", ciphertext=lost, hint="lost")
    migration = importlib.import_module("missions.migrations.0008_provider_keys_in_vault")

    migration.move_to_vault(apps, None)

    assert keys.get("anthropic") == KEY
    assert bytes(ProviderKey.objects.get(provider="openai").ciphertext) == lost
    assert "the stored openai key cannot be read" in caplog.text
    migration.move_to_vault(apps, None)  # once moved, a second pass changes nothing
    assert keys.get("anthropic") == KEY


def test_the_system_checks_report_a_bad_vault(
    monkeypatch: pytest.MonkeyPatch, own_vault: Path
) -> None:
    from django.core.checks import run_checks

    def vault_errors() -> list[str]:
        return [m.msg for m in run_checks() if m.id == "agentos.E020"]

    assert vault_errors() == []
    vault.encrypt("x")
    (own_vault / "vault.keys").chmod(0o644)
    assert "mode 0644" in vault_errors()[0]
    (own_vault / "vault.keys").chmod(0o600)
    monkeypatch.setenv(vault.ENV, "not-a-key")
    assert "Vault key 1 in AGENTOS_VAULT_KEYS" in vault_errors()[0]
