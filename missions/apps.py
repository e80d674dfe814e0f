from django.apps import AppConfig


class MissionsConfig(AppConfig):
    name = "missions"
    verbose_name = "Missions and agent engine"
