"""Runs belong to a kernel `Account` (budget caps, spend, concurrency limit) instead of a
mission: the kernel enforces what it owns and knows no application above it.

An existing database moves over without rewriting a row: each run's former mission id becomes
the id of an account made for it, and the column is renamed in place (the events' too). The
missions app then gives each mission the account of the same id and moves its caps there
(missions 0009).
"""

import django.db.models.deletion
from django.db import migrations, models

# Accounts for the runs already there, numbered as their missions; the identity continues
# after the highest id so new accounts never collide.
ACCOUNTS_OF_EXISTING_RUNS = """
INSERT INTO kernel_account (id, max_concurrent_runs)
SELECT DISTINCT mission_id, 12 FROM kernel_run
ON CONFLICT (id) DO NOTHING;
SELECT setval(pg_get_serial_sequence('kernel_account', 'id'),
    coalesce((SELECT max(id) FROM kernel_account), 0) + 1, false);
"""

# The run's foreign key and indexes follow the renamed column (constraint and index names are
# looked up: Django derived them from a hash).
RUN_AND_EVENT_COLUMNS = """
DO $$
DECLARE
    name text;
BEGIN
    FOR name IN SELECT conname FROM pg_constraint
        WHERE conrelid = 'kernel_run'::regclass AND contype = 'f'
            AND conkey = ARRAY[(SELECT attnum FROM pg_attribute
                WHERE attrelid = 'kernel_run'::regclass AND attname = 'mission_id')]
    LOOP
        EXECUTE format('ALTER TABLE kernel_run DROP CONSTRAINT %I', name);
    END LOOP;
    FOR name IN SELECT indexname FROM pg_indexes
        WHERE tablename = 'kernel_run' AND indexname LIKE 'kernel_run_mission_id%'
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO kernel_run_account_id', name);
    END LOOP;
END $$;
ALTER TABLE kernel_run RENAME COLUMN mission_id TO account_id;
ALTER TABLE kernel_run ADD CONSTRAINT kernel_run_account_id_fk_kernel_account_id
    FOREIGN KEY (account_id) REFERENCES kernel_account (id) DEFERRABLE INITIALLY DEFERRED;
ALTER INDEX run_mission_status RENAME TO run_account_status;
ALTER TABLE kernel_event RENAME COLUMN mission_id TO account_id;
ALTER INDEX kernel_event_mission RENAME TO kernel_event_account;
"""

RUN_AND_EVENT_COLUMNS_BACK = """
ALTER INDEX kernel_event_account RENAME TO kernel_event_mission;
ALTER TABLE kernel_event RENAME COLUMN account_id TO mission_id;
ALTER INDEX run_account_status RENAME TO run_mission_status;
ALTER TABLE kernel_run DROP CONSTRAINT kernel_run_account_id_fk_kernel_account_id;
ALTER TABLE kernel_run RENAME COLUMN account_id TO mission_id;
ALTER INDEX IF EXISTS kernel_run_account_id RENAME TO kernel_run_mission_id;
ALTER TABLE kernel_run ADD CONSTRAINT kernel_run_mission_id_fk_missions_mission_id
    FOREIGN KEY (mission_id) REFERENCES missions_mission (id) DEFERRABLE INITIALLY DEFERRED;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("kernel", "0014_step_results_carry_their_trust"),
    ]

    operations = [
        migrations.CreateModel(
            name="Account",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("max_tokens", models.PositiveBigIntegerField(blank=True, null=True, verbose_name="max tokens")),
                ("max_usd_micros", models.PositiveBigIntegerField(blank=True, null=True, verbose_name="max spend (micro-dollars)")),
                ("max_turns", models.PositiveIntegerField(blank=True, null=True, verbose_name="max turns")),
                ("max_tool_calls", models.PositiveIntegerField(blank=True, null=True, verbose_name="max tool calls")),
                ("max_concurrent_runs", models.PositiveSmallIntegerField(default=12, verbose_name="max concurrent runs")),
            ],
        ),
        migrations.RunSQL(ACCOUNTS_OF_EXISTING_RUNS, reverse_sql=migrations.RunSQL.noop),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(RUN_AND_EVENT_COLUMNS, reverse_sql=RUN_AND_EVENT_COLUMNS_BACK),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="run", name="run_mission_status"),
                migrations.RemoveField(model_name="run", name="mission"),
                migrations.AddField(
                    model_name="run",
                    name="account",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="runs", to="kernel.account"),
                    preserve_default=False,
                ),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(fields=["account", "status"], name="run_account_status"),
                ),
                migrations.RemoveField(model_name="event", name="mission"),
                migrations.AddField(
                    model_name="event",
                    name="account",
                    field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, to="kernel.account"),
                ),
            ],
        ),
    ]
