"""Every wait announces itself from the database, reconciliation waits included: they were
appended by kernel.context after the row was created, so a crash between the two could leave a
wait nobody was told about. One mechanism now, inside the row's own transaction."""

from django.db import migrations

EVERY_WAIT = """
DROP TRIGGER kernel_wait_opened ON kernel_wait;
CREATE TRIGGER kernel_wait_opened AFTER INSERT ON kernel_wait
    FOR EACH ROW EXECUTE FUNCTION kernel_wait_opened_event();
"""

NOT_RECONCILE = """
DROP TRIGGER kernel_wait_opened ON kernel_wait;
CREATE TRIGGER kernel_wait_opened AFTER INSERT ON kernel_wait
    FOR EACH ROW WHEN (NEW.kind <> 'reconcile') EXECUTE FUNCTION kernel_wait_opened_event();
"""


class Migration(migrations.Migration):
    dependencies = [("kernel", "0011_read_steps_announced_when_done")]

    operations = [migrations.RunSQL(EVERY_WAIT, reverse_sql=NOT_RECONCILE)]
