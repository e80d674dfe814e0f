"""Two settings of the database itself (so every connection has them, through any pooler, at no
round trip):

- `plan_cache_mode = force_generic_plan`: the journal's statements are prepared once per
  connection; with the default, PostgreSQL plans its larger statements (the debit of a model
  step with its planned reads) again at every execution, because a custom plan looks cheaper
  than the generic one: ~0.35 ms of planning per statement, measured with make bench, more than
  the rest of the statement. The ORM's statements are not prepared server-side: unaffected.
- `TimeZone = UTC`: Django sets UTC on each new connection unless the server already reports
  it; an embedded server reports `Etc/UTC`, so every connection (a resumed run's first) paid one
  more round trip.

A database user that may not alter its database keeps the defaults (slower, not wrong).
"""

from django.db import migrations

SETTINGS = """
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET plan_cache_mode = force_generic_plan',
                   current_database());
    EXECUTE format('ALTER DATABASE %I SET timezone = ''UTC''', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'agentos: cannot set database defaults (%), keeping the server''s', SQLERRM;
END $$;
"""

RESET = """
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I RESET plan_cache_mode', current_database());
    EXECUTE format('ALTER DATABASE %I RESET timezone', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    NULL;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("kernel", "0015_account")]

    operations = [migrations.RunSQL(SETTINGS, reverse_sql=RESET)]
