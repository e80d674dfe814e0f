import atexit
import gc

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

        # A process's last act is a full collection of its heap (Django and every import: ~1 s
        # on a busy machine), which only frees memory the system takes back anyway; each of
        # `serve`'s processes paid it at every stop. It skips frozen objects. Registered after
        # logging's and weakref.finalize's exit hooks, it runs before them (last in, first out):
        # they still flush logs and remove temporary files.
        atexit.register(gc.freeze)


class OwnerAdminConfig(admin_apps.AdminConfig):
    """The admin site, swapped for one that requires a second factor."""

    default = False  # named explicitly in INSTALLED_APPS
    default_site = "agentos.admin_site.OwnerAdminSite"
