"""Monthly partitions of the event log (`kernel_event`, range-partitioned on `at` by 0003_journal).

Months are created ahead of time so each event lands in its month's own table: old months can
then be detached and dropped without a long DELETE. The DEFAULT partition only catches what
falls outside every month; `ensure_partitions` moves such rows into their month when the
month's table is created. A daily periodic task is expected to call `ensure_partitions()`.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from django.db import connection as default_connection
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

PARENT = "kernel_event"
DEFAULT = "kernel_event_default"


def ensure_partitions(
    *,
    connection: BaseDatabaseWrapper | None = None,
    months_ahead: int = 3,
    today: date | None = None,
) -> list[str]:
    """Create the missing partitions for this month (UTC) and `months_ahead` more.

    Returns the names created; an empty list when everything already existed.
    """
    conn = connection or default_connection
    first = (today or datetime.now(tz=UTC).date()).replace(day=1)
    created = []
    for offset in range(months_ahead + 1):
        start = _add_months(first, offset)
        if _create_month(conn, start=start, end=_add_months(start, 1)):
            created.append(partition_name(start))
    return created


def partitions(*, connection: BaseDatabaseWrapper | None = None) -> list[str]:
    """The attached partitions, months in chronological order, the DEFAULT partition last."""
    conn = connection or default_connection
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = %s::regclass",
            [PARENT],
        )
        names = [row[0] for row in cursor.fetchall()]
    # Month names (kernel_event_yYYYYmMM) sort chronologically as text.
    return sorted(names, key=lambda name: (name == DEFAULT, name))


def partition_name(month: date) -> str:
    return f"{PARENT}_y{month.year:04d}m{month.month:02d}"


def _create_month(conn: BaseDatabaseWrapper, *, start: date, end: date) -> bool:
    """Create and attach one month's partition unless it exists; True when created.

    1. Lock the DEFAULT partition: it serialises concurrent callers (the second one then sees
       the partition and does nothing) and stops inserts from routing new rows of this month
       into DEFAULT while we move them out.
    2. Build the month as a plain table and move this month's rows out of DEFAULT into it.
       `CREATE TABLE ... PARTITION OF` would instead fail outright ("updated partition
       constraint for default partition would be violated") as soon as DEFAULT holds one.
    3. Attach it; PostgreSQL adds the parent's indexes and primary key to it.
    """
    name = partition_name(start)
    qn = conn.ops.quote_name
    # Bounds with an explicit UTC offset: a bare date would be read in the session time zone.
    lower, upper = f"{start.isoformat()} 00:00:00+00", f"{end.isoformat()} 00:00:00+00"
    with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {qn(DEFAULT)} IN ACCESS EXCLUSIVE MODE")
        if name in partitions(connection=conn):
            return False
        # INCLUDING CONSTRAINTS: ATTACH refuses a table without the parent's CHECK constraints.
        cursor.execute(
            f"CREATE TABLE {qn(name)} (LIKE {qn(PARENT)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        # Identifiers are quoted and built from dates above, never from input.
        cursor.execute(
            f"WITH moved AS (DELETE FROM {qn(DEFAULT)} WHERE at >= %s AND at < %s RETURNING *)"  # noqa: S608
            f" INSERT INTO {qn(name)} SELECT * FROM moved",
            [lower, upper],
        )
        cursor.execute(
            f"ALTER TABLE {qn(PARENT)} ATTACH PARTITION {qn(name)}"
            f" FOR VALUES FROM ('{lower}') TO ('{upper}')"
        )
    return True


def _add_months(month: date, count: int) -> date:
    index = month.year * 12 + month.month - 1 + count
    return date(index // 12, index % 12 + 1, 1)
