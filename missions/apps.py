from django.apps import AppConfig


class MissionsConfig(AppConfig):
    name = "missions"
    verbose_name = "Missions and agent engine"

    def ready(self) -> None:
        from agentos.core import scrubber
        from kernel import programs
        from missions import endpoints, keys
        from missions.providers import registry as providers
        from missions.tools import START_MISSION
        from tools import registry

        programs.register("agent", "missions.engine.loop:agent")
        # The stop hook `definition_of_done`: registered on import, where runs execute.
        from missions import verification  # noqa: F401

        registry.register(START_MISSION)
        # Sub-agents: the `delegate` tool, and the stop hook holding a child to its envelope.
        from missions import delegation, envelopes
        from missions.engine.spec import STOP_HOOKS

        registry.register(delegation.DELEGATE)
        registry.register(delegation.CONSULT)
        STOP_HOOKS[envelopes.HOOK] = envelopes.envelope_hook
        from missions.ledger import LEDGER_TOOLS

        for tool in LEDGER_TOOLS:
            registry.register(tool)
        scrubber.register(keys.values)
        providers.use(keys=keys.get, endpoints=endpoints.get)
        # The sandboxes' allow-list and API bridges (cluster.egress asks; it knows no mission).
        from missions import network

        network.register()
