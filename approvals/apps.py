from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals and owner questions"

    def ready(self) -> None:
        from approvals.tools import OWNER_TOOLS
        from tools import registry

        for tool in OWNER_TOOLS:
            registry.register(tool)
