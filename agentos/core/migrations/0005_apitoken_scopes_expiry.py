"""API tokens get scopes and an expiry.

Tokens that exist already keep working as before for what they did (`read` and `act`), but not
for deciding approvals or answering questions (`approve` must be given explicitly: a new token
is needed for that). They expire 90 days after this migration rather than after their creation,
so a script in use is not cut off without warning: the Settings page shows the date.
"""

from datetime import timedelta

import django.contrib.postgres.fields
from django.db import migrations, models
from django.utils import timezone

import agentos.core.models


def expire_existing(apps, schema_editor):
    ApiToken = apps.get_model("agentos", "ApiToken")
    ApiToken.objects.filter(expires_at__isnull=True).update(
        expires_at=timezone.now() + timedelta(days=90)
    )


class Migration(migrations.Migration):
    dependencies = [
        ("agentos", "0004_audit_approval_decided"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="scopes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(
                    choices=[("read", "read"), ("act", "act"), ("approve", "approve")],
                    max_length=16,
                ),
                default=agentos.core.models.default_scopes,
                size=None,
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(null=True, verbose_name="expires at"),
        ),
        migrations.RunPython(expire_existing, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(verbose_name="expires at"),
        ),
    ]
