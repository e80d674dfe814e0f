"""The owner's stop, interrupt and pause reach an executing run at once.

A worker learned of them at its next lease renewal (every third of the lease: 10 s by default),
so a stopped command ran on for up to that long. The database now sends `steer:<run id>` on the
workers' channel when one of these flags is raised on a run that is leased, at the commit of
whoever raised it (the console, the API, a budget stop higher in the tree); the worker executing
that run renews its lease at once, which reads the flags and relays them (`kernel.execution`).
A lost notification costs only the wait for the next renewal, as before.
"""

from django.db import migrations

STEER = """
CREATE FUNCTION kernel_run_steered() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('agentos_kernel', 'steer:' || NEW.id);
    RETURN NULL;
END $$;

CREATE TRIGGER kernel_run_steered AFTER UPDATE OF cancel_requested, interrupt_requested, paused
    ON kernel_run FOR EACH ROW
    WHEN (NEW.lease_owner <> '' AND (
        (NEW.cancel_requested AND NOT OLD.cancel_requested)
        OR (NEW.interrupt_requested AND NOT OLD.interrupt_requested)
        OR (NEW.paused AND NOT OLD.paused)))
    EXECUTE FUNCTION kernel_run_steered();
"""

UNSTEER = """
DROP TRIGGER kernel_run_steered ON kernel_run;
DROP FUNCTION kernel_run_steered();
"""


class Migration(migrations.Migration):
    dependencies = [("kernel", "0016_database_settings")]

    operations = [migrations.RunSQL(STEER, reverse_sql=UNSTEER)]
