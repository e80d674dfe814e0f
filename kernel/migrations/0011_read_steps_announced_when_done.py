"""Read steps are announced once, when they complete: they take milliseconds, their intent may
be planned ahead with the model's answer, and a `step.started` row each cost the journal's hot
path about 40 µs a step (measured with make bench). Steps with an effect, model calls and waits
still announce both ends."""

from django.db import migrations

STARTED_ONLY_FOR_EFFECTS = """
DROP TRIGGER kernel_step_started ON kernel_step;
CREATE OR REPLACE FUNCTION kernel_step_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.effect <> 'read' OR NEW.kind = 'wait_human' THEN
            INSERT INTO kernel_event (at, run_id, seq, kind, trust, data)
            VALUES (now(), NEW.run_id, NEW.seq, 'step.started', 'system',
                    jsonb_build_object('kind', NEW.kind, 'name', NEW.name, 'effect', NEW.effect));
        END IF;
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
-- The WHEN clause is evaluated without calling the function: a read intent pays nothing.
CREATE TRIGGER kernel_step_started AFTER INSERT ON kernel_step
    FOR EACH ROW WHEN (NEW.effect <> 'read' OR NEW.kind = 'wait_human'
                       OR NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION kernel_step_event();
"""

EVERY_STEP_STARTED = """
DROP TRIGGER kernel_step_started ON kernel_step;
CREATE TRIGGER kernel_step_started AFTER INSERT ON kernel_step
    FOR EACH ROW EXECUTE FUNCTION kernel_step_event();
"""


class Migration(migrations.Migration):
    dependencies = [("kernel", "0010_event_stream")]

    operations = [migrations.RunSQL(STARTED_ONLY_FOR_EFFECTS, reverse_sql=EVERY_STEP_STARTED)]
