from django.apps import AppConfig


class MissionsConfig(AppConfig):
    name = "missions"
    verbose_name = "Missions and agent engine"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import the models, which Django loads
        # after the app configs.
        from agentos.core.scrubber import SECRET_SOURCES
        from agentos.core.vault import VAULT_FIELDS
        from cluster import bridges, egress
        from kernel.programs import PROGRAMS
        from memory.scope_names import NAMERS as SCOPE_NAMERS
        from missions import (
            delegation,
            endpoints,
            envelopes,
            keys,
            network,
            verification,
            web,
            web_reader,
        )
        from missions.a2a_call import A2A_CALL
        from missions.engine import loop
        from missions.engine.spec import STOP_HOOKS
        from missions.ledger import LEDGER_TOOLS
        from missions.providers import registry as providers
        from missions.scope_names import projects as project_scopes
        from missions.tools import START_MISSION
        from missions.units import UNIT_TOOLS
        from tools.registry import TOOLS

        PROGRAMS.add("agent", loop.agent)
        # Sub-agents: the `delegate` and `consult` tools, and the stop hook holding a child to its
        # envelope; a mission's run is held to its definition of done.
        for tool in (START_MISSION, delegation.DELEGATE, delegation.CONSULT, *LEDGER_TOOLS):
            TOOLS.add(tool.name, tool)
        # Units of long work, each ending in a verified checkpoint (`missions.units`).
        for tool in UNIT_TOOLS:
            TOOLS.add(tool.name, tool)
        # Calling other agents over A2A, through the run's egress (`missions.a2a_call`).
        TOOLS.add(A2A_CALL.name, A2A_CALL)
        STOP_HOOKS.add(verification.HOOK, verification.done_hook)
        STOP_HOOKS.add(envelopes.HOOK, envelopes.envelope_hook)
        # The Web, read through a quarantined reader held to its answer's schema.
        for tool in web.WEB_TOOLS:
            TOOLS.add(tool.name, tool)
        STOP_HOOKS.add(web_reader.HOOK, web_reader.reader_hook)
        # Memory scopes of projects, named after them on the console's screens.
        SCOPE_NAMERS.add("project", project_scopes)
        SECRET_SOURCES.add("provider keys", keys.values)
        VAULT_FIELDS.add("missions.ProviderKey", "ciphertext")
        VAULT_FIELDS.add("missions.Webhook", "ciphertext")  # webhooks' signing secrets
        providers.use(keys=keys.get, endpoints=endpoints.get)
        # The sandboxes' allow-list and API bridges (cluster.egress asks; it knows no mission).
        egress.EGRESS_POLICY.add("missions", network.POLICY)
        for name, bridge in network.BRIDGES.items():
            bridges.BRIDGES.add(name, bridge)
