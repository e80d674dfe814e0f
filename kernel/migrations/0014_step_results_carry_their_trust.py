"""A step's `step.completed` event carries the trust of whoever produced its result, derived
from what the kernel knows (the step's kind and how it was settled), never from an agent:
the owner's answers and verdicts are `owner`, model text `agent`, a tool's output `tool` (data,
never instructions), the kernel's own bookkeeping `system`. Tool results were `system` before.
A copied step (a fork, settled as `forked`) keeps the trust of its kind: a copied owner answer
is shown as `system`, lower rather than higher."""

from django.db import migrations

FUNCTION = """
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
    VALUES (now(), NEW.run_id, NEW.seq, 'step.completed', {trust},
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
        ELSE '{{}}'::jsonb END);
    RETURN NULL;
END $$;
"""

# Settled by the owner (an answer, or a verdict that gives the result) comes first: the content
# is theirs whatever the step's kind.
TRUE_TRUST = """CASE
        WHEN NEW.settled_by = 'owner' THEN 'owner'
        WHEN NEW.kind IN ('model_call', 'compaction') THEN 'agent'
        WHEN NEW.kind = 'tool_call' THEN 'tool'
        ELSE 'system' END"""

KIND_ONLY = "CASE WHEN NEW.kind IN ('model_call', 'compaction') THEN 'agent' ELSE 'system' END"


class Migration(migrations.Migration):
    dependencies = [("kernel", "0013_run_needs_migration")]

    operations = [
        migrations.RunSQL(
            FUNCTION.format(trust=TRUE_TRUST), reverse_sql=FUNCTION.format(trust=KIND_ONLY)
        )
    ]
