"""Provider keys move from a key derived from SECRET_KEY to the vault (`agentos.core.vault`).

A key the old derivation cannot open (SECRET_KEY changed since it was stored) is left as it is
and named in the log: the owner sets it again; nothing is deleted. Reversing keeps the vault's
encryption (the vault key file stays), so going back needs no secret key.
"""

import base64
import hashlib
import logging

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.db import migrations

logger = logging.getLogger("missions.keys")


def move_to_vault(apps, schema_editor):
    from agentos.core import vault

    ProviderKey = apps.get_model("missions", "ProviderKey")
    digest = hashlib.sha256(b"agentos provider keys:" + settings.SECRET_KEY.encode()).digest()
    legacy = Fernet(base64.urlsafe_b64encode(digest))
    for stored in ProviderKey.objects.all():
        ciphertext = bytes(stored.ciphertext)
        try:
            vault.decrypt(ciphertext)
            continue  # already in the vault
        except vault.Unreadable:
            pass
        try:
            plaintext = legacy.decrypt(ciphertext).decode()
        except InvalidToken:
            logger.error(
                "the stored %s key cannot be read (SECRET_KEY changed since it was set); it is "
                "kept as it is: set it again in Settings",
                stored.provider,
            )
            continue
        ProviderKey.objects.filter(pk=stored.pk).update(ciphertext=vault.encrypt(plaintext))


class Migration(migrations.Migration):
    dependencies = [
        ("missions", "0007_schedules_provider_keys"),
    ]

    operations = [migrations.RunPython(move_to_vault, migrations.RunPython.noop)]
