"""Word counts per scope (`WordCount`), kept by triggers on memory_note and filled from
the notes already indexed.

The triggers are created before the fill: creating one locks memory_note against writes until the
migration commits, so no note is written between the fill's snapshot and the triggers."""

import django.db.models.deletion
from django.db import migrations, models


# `change(scope_ids, searches, sign)`: the notes given (their scopes and tsvectors) counted in
# (+1) or out (-1). Every note counts for the empty word too. A count that falls to 0 is deleted
# (its word is gone from the scope), so the table is exactly what the notes make of it — what a
# rebuilt index (`memory_reindex`) reproduces.
FORWARD = """
CREATE FUNCTION memory_wordcount_change(scope_ids bigint[], searches tsvector[], sign integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF sign > 0 THEN
    INSERT INTO memory_wordcount (scope_id, word, notes)
    SELECT n.scope_id, w.word, count(*)
    FROM unnest(scope_ids, searches) AS n(scope_id, search)
    CROSS JOIN LATERAL (SELECT lexeme AS word FROM unnest(n.search) UNION ALL SELECT '') w
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (scope_id, word) DO UPDATE SET notes = memory_wordcount.notes + EXCLUDED.notes;
  ELSE
    -- Two parts of one statement see the same rows: the ones that fall to 0 go, the others
    -- are lowered.
    WITH gone AS (
      SELECT n.scope_id, w.word, count(*) AS notes
      FROM unnest(scope_ids, searches) AS n(scope_id, search)
      CROSS JOIN LATERAL (SELECT lexeme AS word FROM unnest(n.search) UNION ALL SELECT '') w
      GROUP BY 1, 2
    ), dropped AS (
      DELETE FROM memory_wordcount c USING gone g
      WHERE c.scope_id = g.scope_id AND c.word = g.word AND c.notes <= g.notes
    )
    UPDATE memory_wordcount c SET notes = c.notes - g.notes FROM gone g
    WHERE c.scope_id = g.scope_id AND c.word = g.word AND c.notes > g.notes;
  END IF;
END $$;

CREATE FUNCTION memory_wordcount_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM memory_wordcount_change(array_agg(scope_id), array_agg(search), 1) FROM added;
  RETURN NULL;
END $$;

CREATE FUNCTION memory_wordcount_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM memory_wordcount_change(array_agg(scope_id), array_agg(search), -1) FROM removed;
  RETURN NULL;
END $$;

-- A row whose scope or words changed (never an embedding filled in: see the trigger's WHEN)
-- counts out, then in again. Row by row: the product never changes a note's text in place.
CREATE FUNCTION memory_wordcount_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM memory_wordcount_change(ARRAY[OLD.scope_id], ARRAY[OLD.search], -1);
  PERFORM memory_wordcount_change(ARRAY[NEW.scope_id], ARRAY[NEW.search], 1);
  RETURN NULL;
END $$;

CREATE TRIGGER memory_wordcount_added AFTER INSERT ON memory_note
  REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memory_wordcount_added();
CREATE TRIGGER memory_wordcount_removed AFTER DELETE ON memory_note
  REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION memory_wordcount_removed();
CREATE TRIGGER memory_wordcount_changed AFTER UPDATE ON memory_note FOR EACH ROW
  WHEN (OLD.scope_id IS DISTINCT FROM NEW.scope_id OR OLD.search IS DISTINCT FROM NEW.search)
  EXECUTE FUNCTION memory_wordcount_changed();

INSERT INTO memory_wordcount (scope_id, word, notes)
SELECT n.scope_id, w.word, count(*)
FROM memory_note n
CROSS JOIN LATERAL (SELECT lexeme AS word FROM unnest(n.search) UNION ALL SELECT '') w
GROUP BY 1, 2;
"""

BACKWARD = """
DROP TRIGGER memory_wordcount_added ON memory_note;
DROP TRIGGER memory_wordcount_removed ON memory_note;
DROP TRIGGER memory_wordcount_changed ON memory_note;
DROP FUNCTION memory_wordcount_added();
DROP FUNCTION memory_wordcount_removed();
DROP FUNCTION memory_wordcount_changed();
DROP FUNCTION memory_wordcount_change(bigint[], tsvector[], integer);
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0003_consolidation'),
    ]

    operations = [
        migrations.CreateModel(
            name='WordCount',
            fields=[
                ('pk', models.CompositePrimaryKey('scope', 'word', blank=True, editable=False, primary_key=True, serialize=False)),
                ('word', models.TextField(blank=True)),
                ('notes', models.IntegerField()),
                ('scope', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='memory.scope')),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('word', '')), fields=['scope'], include=('notes',), name='memory_wordcount_size')],
            },
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
