"""The vector index rebuilt as a better-connected graph (`m` 32, `ef_construction` 200, against
pgvector's default 16 and 64), read with a narrower beam (`memory.search.BEAM` 200, was 300).

Measured on 100,000 notes of one scope (the realistic set padded, its conversation's 155
questions), each index built at once: 16 / 64 found 127 of the answers at a beam of 300 (and an
index built as the notes came, 124), 24 / 128 found 131, 32 / 200 found 132, as many as an exact
scan; 32 / 200 at a beam of 200 still 132, with the search's p95 38.3 ms against 39.0 for 16 / 64
at 300. The price is in the writes: the build took 125 s against 38, and each note's insertion
into the graph costs about as much more.
"""

from django.db import migrations
from pgvector.django import HnswIndex


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0006_writer_time_index"),
    ]

    operations = [
        # The graph is built in memory when it fits (about 200 MB at 100,000 notes), several
        # times faster than on disk; for this transaction only.
        migrations.RunSQL(
            "SET LOCAL maintenance_work_mem = '512MB'", reverse_sql=migrations.RunSQL.noop
        ),
        migrations.RemoveIndex(model_name="note", name="memory_note_embedding"),
        migrations.AddIndex(
            model_name="note",
            index=HnswIndex(
                name="memory_note_embedding",
                fields=["embedding"],
                m=32,
                ef_construction=200,
                opclasses=["vector_cosine_ops"],
            ),
        ),
    ]
