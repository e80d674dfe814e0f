from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = "Tools and permissions"

    def ready(self) -> None:
        # Here, not at the top: these modules import the models, which need the app registry.
        from agentos.core.scrubber import SECRET_SOURCES
        from agentos.core.vault import VAULT_FIELDS
        from kernel.programs import PROGRAMS
        from tools import remotes
        from tools.builtin import BUILTIN
        from tools.mcp import remote
        from tools.registry import TOOLS

        for tool in BUILTIN:
            TOOLS.add(tool.name, tool)
        # Listing a remote MCP server before any run uses it: a short run of its own.
        PROGRAMS.add(remote.LISTING, remote.listing_program)
        # A vault rotation re-encrypts the remotes' credentials too.
        VAULT_FIELDS.add("tools.RemoteCredential", "ciphertext")
        SECRET_SOURCES.add("remote credentials", remotes.values)
