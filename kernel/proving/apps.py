from django.apps import AppConfig

from kernel.proving import register


class ProvingConfig(AppConfig):
    """Installed only where the chaos workload runs in processes a test starts whole (the live
    stack of tests/live.py, `tests.live_settings`): `ready()` registers its programs there.
    Never in the product's INSTALLED_APPS."""

    name = "kernel.proving"
    label = "kernel_proving"
    verbose_name = "Kernel proving workloads"

    def ready(self) -> None:
        register()
