from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class AgentosConfig(AppConfig):
    default = True
    name = "agentos"
    verbose_name = "agentos: owner and access"

    def ready(self) -> None:
        from agentos import checks  # noqa: F401  # registers the system checks
        from agentos.vault import register

        register("agentos.PushState", "vapid_private")  # rotated with the other secrets


class OwnerAdminConfig(admin_apps.AdminConfig):
    """The admin site, swapped for one that requires a second factor."""

    default = False  # named explicitly in INSTALLED_APPS
    default_site = "agentos.admin_site.OwnerAdminSite"
