from django.db import migrations


def create_partitions(apps, schema_editor):  # type: ignore[no-untyped-def]
    from kernel import partitions

    partitions.ensure_partitions(connection=schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("kernel", "0003_journal")]
    operations = [migrations.RunPython(create_partitions, migrations.RunPython.noop)]
