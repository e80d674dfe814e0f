"""An index on each writer's notes in time within a scope: search reads a note in its context,
the notes its writer put just before and after it (`memory.search._in_context`), in a few index
entries however many notes of other writers, or of the same moment, the scope holds."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0005_verified_by"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="note",
            index=models.Index(
                fields=["scope", "author", "valid_from", "id"], name="memory_note_writer_time"
            ),
        ),
    ]
