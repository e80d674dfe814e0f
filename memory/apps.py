from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        # Here, not at the top: memory.tools imports the models, which need the app registry.
        from memory.tools import MEMORY_TOOLS
        from tools import registry

        for tool in MEMORY_TOOLS:
            registry.register(tool)
