"""Schedules start missions from a template (the body of POST /api/v1/missions), in a time zone,
with a catch-up policy and a history; the flat fields become the template (0020 drops them)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import missions.models


def to_templates(apps, schema_editor):
    Schedule = apps.get_model("missions", "Schedule")
    for schedule in Schedule.objects.all():
        template = {"project_id": schedule.project_id, "goal": schedule.goal}
        if schedule.definition_of_done:
            template["definition_of_done"] = schedule.definition_of_done
        schedule.mission = template
        schedule.save(update_fields=["mission"])


def to_flat_fields(apps, schema_editor):
    Schedule = apps.get_model("missions", "Schedule")
    for schedule in Schedule.objects.all():
        template = schedule.mission or {}
        schedule.project_id = template.get("project_id")
        schedule.goal = template.get("goal", "")
        schedule.definition_of_done = template.get("definition_of_done", "")
        schedule.save(update_fields=["project", "goal", "definition_of_done"])


class Migration(migrations.Migration):
    dependencies = [
        ("missions", "0018_search_backend"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="schedule",
            options={"ordering": ["name", "pk"]},
        ),
        migrations.AddField(
            model_name="schedule",
            name="allow_overlap",
            field=models.BooleanField(default=False, verbose_name="allow overlap"),
        ),
        migrations.AddField(
            model_name="schedule",
            name="catch_up",
            field=models.CharField(
                choices=[
                    ("skip", "Skip the missed times"),
                    ("once", "Run once for the missed times"),
                    ("each", "Run each missed time"),
                ],
                default="skip",
                max_length=8,
                verbose_name="after downtime",
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="mission",
            field=models.JSONField(default=dict, verbose_name="mission template"),
        ),
        migrations.AddField(
            model_name="schedule",
            name="timezone",
            field=models.CharField(
                default=missions.models.default_timezone, max_length=64, verbose_name="time zone"
            ),
        ),
        migrations.CreateModel(
            name="ScheduleFiring",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("due_at", models.DateTimeField()),
                ("fired_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "outcome",
                    models.CharField(
                        choices=[
                            ("started", "Started"),
                            ("skipped_overlap", "Skipped: the previous one was still running"),
                            ("skipped_catch_up", "Skipped: missed during downtime"),
                            ("failed", "Failed"),
                        ],
                        max_length=20,
                    ),
                ),
                ("error", models.TextField(blank=True)),
                (
                    "mission",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="missions.mission",
                    ),
                ),
                (
                    "schedule",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="firings",
                        to="missions.schedule",
                    ),
                ),
            ],
            options={
                "ordering": ["-due_at"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("schedule", "due_at"), name="schedule_firing_once"
                    )
                ],
            },
        ),
        migrations.RunPython(to_templates, to_flat_fields),
    ]
