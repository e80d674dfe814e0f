"""A step's idempotency key is not stored any more: it is `sha256("agentos-step:<run>:<seq>")`
(`kernel.journal.idempotency_key`), which every reader now computes. New steps hold an empty
key: 64 bytes less in every step row, written twice per step (its intent, then its result's row
version).

Steps written before keep their key (the same value): nothing to move, nothing lost. Reversed,
the empty keys of the steps written since are filled in.
"""

from django.db import migrations, models

FILL_KEYS = """
UPDATE kernel_step
SET idempotency_key = encode(sha256(convert_to('agentos-step:' || run_id || ':' || seq, 'UTF8')),
    'hex')
WHERE idempotency_key = '';
"""


class Migration(migrations.Migration):
    dependencies = [("kernel", "0018_step_events_from_step_rows")]

    operations = [
        migrations.AlterField(
            model_name="step",
            name="idempotency_key",
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.RunSQL(migrations.RunSQL.noop, reverse_sql=FILL_KEYS),
    ]
