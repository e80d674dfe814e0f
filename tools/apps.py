from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = "Tools and permissions"

    def ready(self) -> None:
        from agentos.core import scrubber, vault
        from tools import remotes

        # A vault rotation re-encrypts the remotes' credentials too.
        vault.register("tools.RemoteCredential", "ciphertext")
        scrubber.register(remotes.values)
