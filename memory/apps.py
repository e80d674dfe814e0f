from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        # Here, not at the top: memory.tools imports the models, which need the app registry.
        from memory.skill_tools import SKILL_TOOLS
        from memory.tools import MEMORY_TOOLS
        from tools.registry import TOOLS

        for tool in (*MEMORY_TOOLS, *SKILL_TOOLS):
            TOOLS.add(tool.name, tool)
