from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals and owner questions"

    def ready(self) -> None:
        # Here, not at the top: approvals.tools imports the models, which need the app registry.
        from approvals.tools import OWNER_TOOLS
        from tools.registry import TOOLS

        for tool in OWNER_TOOLS:
            TOOLS.add(tool.name, tool)
