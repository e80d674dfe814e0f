from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ShellConfig(AppConfig):
    """The project shell: settings, URLs, the one API, Home and Settings, the commands."""

    default = True
    name = "agentos"
    label = "shell"
    verbose_name = "agentos"

    def ready(self) -> None:
        from agentos import checks  # noqa: F401  # registers the system checks


class OwnerAdminConfig(admin_apps.AdminConfig):
    """The admin site, swapped for one that requires a second factor."""

    default = False  # named explicitly in INSTALLED_APPS
    default_site = "agentos.admin_site.OwnerAdminSite"
