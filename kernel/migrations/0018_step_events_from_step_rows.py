"""Step events are derived from the step rows by the sequencer (`kernel.stream`) instead of being
inserted by triggers on every journal write.

The two triggers of 0010/0011 cost each write step two inserts into the partitioned events table
(a PL/pgSQL call, partition routing, three index entries each): measured with EXPLAIN ANALYZE,
more than half of each journal statement's own time. A step row now carries what its events
need to be placed in the stream exactly where the triggers would have put them:

- `started_event`, `finished_event`: the event ids (from the events' own sequence), taken by the
  intent's insert (a column default) and by the result's update (the journal's statements), so
  derived events interleave with the other events in the same id order as before;
- `started_tx`, `finished_tx`: the writing transactions, so the sequencer derives an event only
  once nothing older can still appear, like every other event (`kernel.stream`);
- `announced`: 0 nothing derived yet, 1 its `step.started`, 2 done (a partial index keeps the
  sequencer's work list small, and the journal's result update, which does not touch it, HOT).

Steps already in the table were announced by the triggers: they keep `announced = 2`, except the
unfinished ones, whose `step.completed` is still to come. Rows born finished (a fork's copies) get
their completion's id and transaction from a BEFORE INSERT trigger whose WHEN clause an intent
never passes. Reversed, the pending events are written out (unnumbered, for the old sequencer)
and the triggers come back.
"""

from django.db import migrations

# The event data and trust of 0014's trigger function, as expressions over a step row `s`.
STARTED_DATA = "jsonb_build_object('kind', s.kind, 'name', s.name, 'effect', s.effect)"
COMPLETED_TRUST = """CASE
        WHEN s.settled_by = 'owner' THEN 'owner'
        WHEN s.kind IN ('model_call', 'compaction') THEN 'agent'
        WHEN s.kind = 'tool_call' THEN 'tool'
        ELSE 'system' END"""
COMPLETED_DATA = """jsonb_build_object(
            'kind', s.kind, 'name', s.name, 'settled_by', s.settled_by,
            'input_tokens', s.input_tokens, 'output_tokens', s.output_tokens,
            'cache_read_tokens', s.cache_read_tokens,
            'cache_write_tokens', s.cache_write_tokens, 'usd_micros', s.usd_micros)
        || CASE WHEN jsonb_typeof(s.result) = 'object' THEN jsonb_strip_nulls(
            jsonb_build_object(
                'is_error', s.result -> 'is_error',
                'text', CASE s.kind
                    WHEN 'model_call' THEN NULLIF(s.result -> 'text', '""')
                    WHEN 'compaction' THEN NULLIF(s.result -> 'narrative', '""') END,
                'reasoning', CASE WHEN s.kind = 'model_call'
                    THEN NULLIF(s.result -> 'reasoning', '""') END))
        ELSE '{}'::jsonb END"""
# Which steps announce their start (0011): effects, model calls and waits; reads only complete.
ANNOUNCES_START = "(s.effect <> 'read' OR s.kind = 'wait_human')"

FORWARD = f"""
DROP TRIGGER kernel_step_started ON kernel_step;
DROP TRIGGER kernel_step_completed ON kernel_step;
-- kernel_step_event() stays: the reverse migration puts its triggers back.

-- Constant default first: existing rows take it without a table rewrite.
ALTER TABLE kernel_step
    ADD COLUMN started_event bigint NULL,
    ADD COLUMN started_tx xid8 NULL,
    ADD COLUMN finished_event bigint NULL,
    ADD COLUMN finished_tx xid8 NULL,
    ADD COLUMN announced smallint NOT NULL DEFAULT 2;
UPDATE kernel_step s SET announced = CASE WHEN {ANNOUNCES_START} THEN 1 ELSE 0 END
    WHERE finished_at IS NULL;
ALTER TABLE kernel_step
    ALTER COLUMN started_event SET DEFAULT nextval('kernel_event_id_seq'),
    ALTER COLUMN started_tx SET DEFAULT pg_current_xact_id(),
    ALTER COLUMN announced SET DEFAULT 0;
CREATE INDEX kernel_step_unannounced ON kernel_step (id) WHERE announced < 2;

CREATE FUNCTION kernel_step_born_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- After the column defaults: the completion's id follows the start's.
    NEW.finished_event := nextval('kernel_event_id_seq');
    NEW.finished_tx := pg_current_xact_id();
    RETURN NEW;
END $$;
CREATE TRIGGER kernel_step_born_finished BEFORE INSERT ON kernel_step
    FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION kernel_step_born_finished();
"""  # noqa: S608  # assembled from this module's constants only

REVERSE = f"""
INSERT INTO kernel_event (id, at, run_id, seq, kind, trust, data, tx)
SELECT coalesce(s.started_event, nextval('kernel_event_id_seq')), s.started_at, s.run_id, s.seq,
    'step.started', 'system', {STARTED_DATA}, s.started_tx
FROM kernel_step s WHERE s.announced = 0 AND {ANNOUNCES_START};
INSERT INTO kernel_event (id, at, run_id, seq, kind, trust, data, tx)
SELECT coalesce(s.finished_event, nextval('kernel_event_id_seq')), s.finished_at, s.run_id, s.seq,
    'step.completed', {COMPLETED_TRUST}, {COMPLETED_DATA}, s.finished_tx
FROM kernel_step s WHERE s.announced < 2 AND s.finished_at IS NOT NULL;

DROP TRIGGER kernel_step_born_finished ON kernel_step;
DROP FUNCTION kernel_step_born_finished();
DROP INDEX kernel_step_unannounced;
ALTER TABLE kernel_step
    DROP COLUMN started_event, DROP COLUMN started_tx, DROP COLUMN finished_event,
    DROP COLUMN finished_tx, DROP COLUMN announced;

CREATE TRIGGER kernel_step_started AFTER INSERT ON kernel_step
    FOR EACH ROW WHEN (NEW.effect <> 'read' OR NEW.kind = 'wait_human'
                       OR NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION kernel_step_event();
CREATE TRIGGER kernel_step_completed AFTER UPDATE OF finished_at ON kernel_step
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION kernel_step_event();
"""  # noqa: S608  # assembled from this module's constants only


class Migration(migrations.Migration):
    dependencies = [("kernel", "0017_steer_notifications")]

    # The new columns are the database's own (like kernel_event.tx): Django never reads or
    # writes them, so inserts through the ORM (forks, tests) get their defaults.
    operations = [migrations.RunSQL(FORWARD, reverse_sql=REVERSE)]
