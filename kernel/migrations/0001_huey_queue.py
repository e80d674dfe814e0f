"""The huey worker pool's tables, in their own schema (see agentos.queue)."""

from django.db import migrations

# The DDL huey's SqlStorage would run through peewee, with every object in the `huey` schema.
CREATE = """
CREATE SCHEMA IF NOT EXISTS huey;
CREATE TABLE IF NOT EXISTS huey.kv (
    queue VARCHAR(255) NOT NULL, key VARCHAR(255) NOT NULL, value BYTEA NOT NULL,
    PRIMARY KEY (queue, key));
CREATE TABLE IF NOT EXISTS huey.schedule (
    id SERIAL NOT NULL PRIMARY KEY, queue VARCHAR(255) NOT NULL, data BYTEA NOT NULL,
    timestamp BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS schedule_queue_timestamp ON huey.schedule (queue, timestamp);
CREATE TABLE IF NOT EXISTS huey.task (
    id SERIAL NOT NULL PRIMARY KEY, queue VARCHAR(255) NOT NULL, data BYTEA NOT NULL,
    priority REAL NOT NULL);
CREATE INDEX IF NOT EXISTS task_priority_id ON huey.task (priority DESC, id);
CREATE TABLE IF NOT EXISTS huey.counter (
    queue VARCHAR(255) NOT NULL, key VARCHAR(255) NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (queue, key));
"""


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunSQL(CREATE, reverse_sql="DROP SCHEMA IF EXISTS huey CASCADE;")]
