"""The full-text column filled by a trigger instead of a generated column: Django's checks of a
generated field open a database connection, which `manage.py check` must not need."""

from django.contrib.postgres.search import SearchVectorField
from django.db import migrations

FORWARD = """
DROP INDEX IF EXISTS memory_note_search;
ALTER TABLE memory_note DROP COLUMN search;
ALTER TABLE memory_note ADD COLUMN search tsvector NULL;
CREATE FUNCTION memory_note_search() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.search := setweight(to_tsvector('english'::regconfig, coalesce(NEW.title, '')), 'A')
             || setweight(to_tsvector('english'::regconfig, coalesce(NEW.body, '')), 'B');
  RETURN NEW;
END $$;
CREATE TRIGGER memory_note_search BEFORE INSERT OR UPDATE OF title, body, search ON memory_note
  FOR EACH ROW EXECUTE FUNCTION memory_note_search();
UPDATE memory_note SET title = title;
CREATE INDEX memory_note_search ON memory_note USING gin (search);
"""

BACKWARD = """
DROP TRIGGER memory_note_search ON memory_note;
DROP FUNCTION memory_note_search();
DROP INDEX IF EXISTS memory_note_search;
ALTER TABLE memory_note DROP COLUMN search;
ALTER TABLE memory_note ADD COLUMN search tsvector GENERATED ALWAYS AS (
  setweight(to_tsvector('english'::regconfig, COALESCE(title, '')), 'A')
  || setweight(to_tsvector('english'::regconfig, COALESCE(body, '')), 'B')) STORED;
CREATE INDEX memory_note_search ON memory_note USING gin (search);
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_index")]

    operations = [
        migrations.RunSQL(
            FORWARD,
            BACKWARD,
            state_operations=[
                migrations.RemoveField("note", "search"),
                migrations.AddField(
                    "note", "search", SearchVectorField(null=True, editable=False)
                ),
            ],
        )
    ]
