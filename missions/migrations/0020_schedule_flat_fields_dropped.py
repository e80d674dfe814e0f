"""The schedules' flat fields, now in their template (0019)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("missions", "0019_schedule_templates"),
    ]

    operations = [
        migrations.RemoveField(
            model_name="schedule",
            name="definition_of_done",
        ),
        migrations.RemoveField(
            model_name="schedule",
            name="goal",
        ),
        migrations.RemoveField(
            model_name="schedule",
            name="project",
        ),
    ]
