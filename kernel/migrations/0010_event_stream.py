"""The event stream: step events written by the database, and event numbers (kernel.stream)."""

from django.db import migrations, models

# Steps announce themselves in the event log from the database, so every writer of kernel_step
# (the journal's hot-path statements, the planned reads of a result, forks) is covered and the
# journal's Python path pays nothing. `step.completed` fires when `finished_at` is first set:
# the journal sets it with the result, in the same statement. Mission ids stay NULL (a lookup
# per step would cost the hot path); kernel.stream fills them in from the run when it reads.
# Waits opened with a step's intent get their `wait.opened` the same way.
STEP_EVENTS = """
CREATE FUNCTION kernel_step_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO kernel_event (at, run_id, seq, kind, trust, data)
        VALUES (now(), NEW.run_id, NEW.seq, 'step.started', 'system',
                jsonb_build_object('kind', NEW.kind, 'name', NEW.name, 'effect', NEW.effect));
        -- A step born finished (a fork copies recorded steps) also completes at once.
        IF NEW.finished_at IS NULL THEN
            RETURN NULL;
        END IF;
    END IF;
    INSERT INTO kernel_event (at, run_id, seq, kind, trust, data)
    VALUES (now(), NEW.run_id, NEW.seq, 'step.completed',
        -- Model text is the agent's word, not the system's.
        CASE WHEN NEW.kind IN ('model_call', 'compaction') THEN 'agent' ELSE 'system' END,
        jsonb_build_object(
            'kind', NEW.kind, 'name', NEW.name, 'settled_by', NEW.settled_by,
            'input_tokens', NEW.input_tokens, 'output_tokens', NEW.output_tokens,
            'cache_read_tokens', NEW.cache_read_tokens,
            'cache_write_tokens', NEW.cache_write_tokens, 'usd_micros', NEW.usd_micros)
        || CASE WHEN jsonb_typeof(NEW.result) = 'object' THEN jsonb_strip_nulls(
            jsonb_build_object(
                'is_error', NEW.result -> 'is_error',
                -- The whole text the console saw stream as deltas (which are never stored).
                'text', CASE NEW.kind
                    WHEN 'model_call' THEN NULLIF(NEW.result -> 'text', '""')
                    WHEN 'compaction' THEN NULLIF(NEW.result -> 'narrative', '""') END,
                'reasoning', CASE WHEN NEW.kind = 'model_call'
                    THEN NULLIF(NEW.result -> 'reasoning', '""') END))
        ELSE '{}'::jsonb END);
    RETURN NULL;
END $$;

-- Human waits (approvals, questions) and timers open with their step's intent, in the journal's
-- statement; reconciliation waits are opened by kernel.context, which appends their event.
CREATE FUNCTION kernel_wait_opened_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO kernel_event (at, run_id, seq, kind, trust, data)
    VALUES (now(), NEW.run_id, NEW.seq, 'wait.opened', 'system',
            jsonb_build_object('wait_kind', NEW.kind, 'wait', NEW.id));
    RETURN NULL;
END $$;

CREATE TRIGGER kernel_wait_opened AFTER INSERT ON kernel_wait
    FOR EACH ROW WHEN (NEW.kind <> 'reconcile') EXECUTE FUNCTION kernel_wait_opened_event();

CREATE TRIGGER kernel_step_started AFTER INSERT ON kernel_step
    FOR EACH ROW EXECUTE FUNCTION kernel_step_event();
-- The WHEN clause is checked without calling the function: other updates pay almost nothing.
CREATE TRIGGER kernel_step_completed AFTER UPDATE OF finished_at ON kernel_step
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION kernel_step_event();
"""

DROP_STEP_EVENTS = """
DROP TRIGGER kernel_wait_opened ON kernel_wait;
DROP FUNCTION kernel_wait_opened_event();
DROP TRIGGER kernel_step_completed ON kernel_step;
DROP TRIGGER kernel_step_started ON kernel_step;
DROP FUNCTION kernel_step_event();
"""

# Event numbers (see kernel.stream): `tx` is the writing transaction, `number` the position in
# the stream, given by the sequencer once nothing older can still appear. `tx` gets its default
# after the column exists, so existing rows keep NULL (no table rewrite) and count as old.
# No UNIQUE on `number`: PostgreSQL cannot enforce one across partitions without the partition
# key; the sequencer's advisory lock is what keeps numbers unique.
NUMBERS = """
ALTER TABLE kernel_event ADD COLUMN tx xid8 NULL;
ALTER TABLE kernel_event ALTER COLUMN tx SET DEFAULT pg_current_xact_id();
ALTER TABLE kernel_event ADD COLUMN number bigint NULL;
-- Pages by cursor (`number > N ORDER BY number`) and the head (max).
CREATE INDEX kernel_event_number ON kernel_event (number) WHERE number IS NOT NULL;
-- The sequencer's work list: small, since rows leave it once numbered.
CREATE INDEX kernel_event_unnumbered ON kernel_event (id) WHERE number IS NULL;
-- Step events (most of the log) have no mission: keep them out of the mission index, an entry
-- less to write per step.
DROP INDEX kernel_event_mission;
CREATE INDEX kernel_event_mission ON kernel_event (mission_id, id) WHERE mission_id IS NOT NULL;
"""

DROP_NUMBERS = """
DROP INDEX kernel_event_mission;
CREATE INDEX kernel_event_mission ON kernel_event (mission_id, id);
DROP INDEX kernel_event_unnumbered;
DROP INDEX kernel_event_number;
ALTER TABLE kernel_event DROP COLUMN number;
ALTER TABLE kernel_event DROP COLUMN tx;
"""


class Migration(migrations.Migration):
    dependencies = [("kernel", "0009_run_paused")]

    operations = [
        migrations.RunSQL(STEP_EVENTS, reverse_sql=DROP_STEP_EVENTS),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="event",
                    name="number",
                    field=models.BigIntegerField(blank=True, editable=False, null=True),
                ),
            ],
            database_operations=[migrations.RunSQL(NUMBERS, reverse_sql=DROP_NUMBERS)],
        ),
    ]
