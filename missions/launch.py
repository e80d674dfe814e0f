"""Creating missions and starting their root runs: the one path every trigger takes (console,
API, schedule, another agent), so billing, journal and telemetry are the same whoever pulled it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.urls import reverse

from cluster import bridges as cluster_bridges
from kernel import budgets, runs
from kernel.budgets import CAP_FIELDS, validate_caps
from kernel.models import Run, Trust
from memory import skills as memory_skills
from memory import store as memory_store
from memory.tools import MEMORY_TOOL_NAMES
from missions import a2a_call, profiles, search, verification, web
from missions import offline as offline_missions
from missions.engine import framing
from missions.errors import MissionError
from missions.ledger import LEDGER_TOOL_NAMES
from missions.models import Mission, Project, Role
from missions.providers import registry as providers
from missions.routing import configured_route, route_for
from missions.units import UNIT_TOOL_NAMES
from tools import levels
from tools import registry as tool_registry
from tools.builtin import CODING_TOOLS, MERGING_TOOLS
from tools.mcp import toolset as mcp_toolset
from tools.mcp.models import McpServer

CODING_INSTRUCTIONS = """\
You work in a git repository of your own, on the project's code, mounted at /workspace in the
sandbox where the shell tool runs commands (no network there, .git read-only; use the git tools).
Protected paths (agent configuration, hooks, rc files, .github/...) cannot be changed. Read before
you edit; run the tests with the shell tool; commit your work with git_commit; git_push asks the
owner to approve the exact commit.
The project's state lives in its repository: PROGRESS.md (where the work stands), DECISIONS.md
(what was decided and why), features.json (each feature and whether it passes) and init.sh (how to
set up and smoke-test). Start by reading those that exist and the recent git log; keep your plan in
todo.md and your findings in notes.md; before you finish, update PROGRESS.md (and DECISIONS.md for
a decision) and commit it. Record what later missions should know with memory_write.
Work of more than a few hours: cut it into units of 1 to 3 hours with unit_plan, each ending in
checkpoint commands; finish a unit with unit_checkpoint before the next begins."""

# What the instructions say of where commands run, by sandbox level (`tools.levels`).
LEVEL_INSTRUCTIONS = {
    0: "This mission is read-only research: you may read the repository and memory, not change"
    " them nor run commands.",
    2: "Each command you run starts a disposable virtual machine that sees only /workspace and"
    " the system's programs: it is slower than a shell, so group commands.",
}


def start_mission(
    mission: Mission,
    *,
    trigger: str = "owner",
    script: dict[str, Any] | None = None,
    offline: str | None = None,
    max_turns: int = 50,
    criteria: list[dict[str, Any]] | None = None,
    brief: Brief | None = None,
) -> Run:
    """Start the mission's executor run on its route (the scripted model when the route's
    provider has no key: then `script` is what it plays, or the offline mission `offline`'s).
    With `criteria` (validated: `verification.validate`), the run ends `done` only when each
    passes. A `brief` follows the goal in the first message, as data (`with_brief`)."""
    route = route_for(mission, "executor")
    servers = [*mission.mcp_servers, *(mission.project.mcp_servers or [])]
    criteria = criteria or list(mission.criteria or [])
    if not criteria and offline is None:
        # A mission that gives none is held to its project's defaults (the offline missions
        # play their own definition of done).
        criteria = list(mission.project.default_criteria or [])
    level = levels.level_for(mission.risk_class)
    why = levels.unavailable(level)
    if why is not None:
        raise MissionError(
            f"This mission's risk class needs sandbox level {level} ({levels.NAMES[level]}):"
            f" {why}.",
            code="sandbox_unavailable",
        )
    if offline is not None:
        script = offline_missions.get(offline).script
    if route.provider == "scripted" and script is None:
        raise needs_a_model(
            stand_in=route.scripted_stand_in,
            provider=configured_route(mission, "executor").provider,
        )
    constraints = []
    if mission.definition_of_done.strip():
        constraints.append(f"Definition of done: {mission.definition_of_done.strip()}")
    if criteria:
        constraints.append(verification.constraint(criteria))
    repository = mission.project.repository
    spec: dict[str, Any] = {
        "goal": with_brief(mission.goal, brief),
        "provider": route.provider,
        "model": route.model,
        "effort": route.effort,
        # The model decides how much to think (docs/design.md §12); effort steers the spend.
        "thinking": route.provider != "scripted",
        "tools": _tools(repository=repository, brief=brief, level=level),
        # Frozen at launch: the notes of global and this project's memory the owner verified,
        # given to the model as data with their provenance (`memory_as_data`). A mission on a
        # brief from outside answers its sender: the owner's global notes stay out of it.
        "memory_index": memory_store.prompt_index(
            [scope for scope in memory_scopes(mission) if brief is None or scope != "global"]
        ),
        "memory_as_data": True,
        "constraints": constraints,
        "instructions": "\n".join(
            text
            for text in (
                CODING_INSTRUCTIONS if repository else "",
                LEVEL_INSTRUCTIONS.get(level),
                project_instructions(mission.project),
            )
            if text
        ),
        "repository": repository,
        "checkpoints": bool(repository),
        # The resume routine: a smoke test, the progress file and the ledger at the start and
        # at each resume, and the watch on the mission's units (`missions.engine.resume`).
        "resume": bool(repository),
        # What is not the owner's or the system's reaches the model as data (engine `framing`).
        "data_framing": True,
        "max_turns": max_turns,
        # Going round in circles: a re-plan, then a question to the owner (engine `stalls`).
        "stalls": True,
        # Old tool results kept until compaction on a provider that caches prompts (`window`).
        "cache_aware_clearing": True,
        "sandbox_level": level,
        # The enabled MCP tools of its servers and its project's, frozen (`tools.mcp.toolset`).
        "mcp_tools": mcp_toolset.freeze(servers),
    }
    _add_skills(spec, repository)
    if mission.profile_id is not None:
        profiles.narrow(spec, mission.profile)
    if criteria:
        spec["criteria"] = criteria
        spec["stop_hook"] = verification.HOOK
    _add_reach(spec, mission, servers)
    if route.provider == "scripted":
        spec["script"] = script
    return runs.start_run(
        account=mission,
        program="agent",
        input=spec,
        # The mission's wall-time cap is its root run's duration cap, from the run's start.
        caps={"max_seconds": mission.max_seconds} if mission.max_seconds is not None else None,
        model=route.model,
        contract={
            "trigger": trigger,
            "scripted_stand_in": route.scripted_stand_in,
            # Read by the run page (who ran it) and by a relaunch (offline again).
            **({"offline": offline} if offline is not None else {}),
        },
    )


def _tools(*, repository: str, brief: Brief | None, level: int) -> list[str]:
    """The root run's tools. It supervises: it keeps the mission's ledger (`missions.ledger`);
    `delegate`: it may hand tasks to sub-agents (`missions.delegation`), and merge its writers'
    work (`merge_work`) when it has a repository; `consult_advisor`: it may ask the planner's
    (stronger) model for advice."""
    return _allowed(
        [
            *(CODING_TOOLS if repository else []),
            *(MERGING_TOOLS if repository else []),
            *MEMORY_TOOL_NAMES,
            *LEDGER_TOOL_NAMES,
            # Long work cut into units, each ending in a verified checkpoint.
            *(UNIT_TOOL_NAMES if repository and level >= 1 else []),
            # Work from outside may need a question answered: its sender answers (A2A).
            *(["ask_owner"] if brief is not None and not repository else []),
            "delegate",
            "consult_advisor",
            # The Web, through the quarantined reader; search once a backend is set.
            web.FETCH,
            *([web.SEARCH] if search.get() is not None else []),
            # Another agent over A2A, through the run's egress (asks the owner by default).
            a2a_call.NAME,
        ],
        level,
    )


def project_instructions(project: Project) -> str:
    """The owner's instructions for the project's runs, in their system prompt: only what the
    owner saved (typed, or imported from AGENTS.md at the default branch head by their act),
    never a file of a run's worktree (docs/design.md §19)."""
    text = project.instructions.strip()
    if not text:
        return ""
    source = f", imported from {project.instructions_from}" if project.instructions_from else ""
    return f"The owner's instructions for this project{source}:\n{text}"


def _add_skills(spec: dict[str, Any], repository: str) -> None:
    """Skills, frozen at launch (`memory.skills`): the repository's at the commit the run then
    starts from, and those the owner approved; their bodies are read with load_skill."""
    offered, commit = memory_skills.offered(repository)
    if offered:
        spec["skills"] = offered
        spec["tools"].append("load_skill")
    if any(skill["source"] == "repository" for skill in offered):
        spec["base"] = commit


def _add_reach(spec: dict[str, Any], mission: Mission, servers: list[str]) -> None:
    """What the run may reach besides the owner's egress rules, only when set: the input of a
    run that reaches nothing more keeps its former shape."""
    for name in ("bridges", "allowed_hosts"):
        if value := list(getattr(mission, name) or []):
            spec[name] = value
    # Its HTTP MCP servers' hosts or bridges: their sessions go through its egress.
    for name, needed in mcp_toolset.reach(servers).items():
        spec[name] = list(dict.fromkeys([*spec.get(name, []), *needed]))
    if mission.sensitive:
        spec["sensitive"] = True


@dataclass(frozen=True)
class Brief:
    """Text from outside that a mission works on (an A2A caller's task): its source and trust
    name it in its data block."""

    text: str
    source: str
    trust: Trust = Trust.WEB


def with_brief(goal: str, brief: Brief | None) -> str:
    """The first message of a mission's run: our goal, then the brief as a data block — never
    in the system prompt, never as the owner's words (docs/design.md §12)."""
    if brief is None:
        return goal
    return f"{goal}\n\n{framing.render(brief.text, trust=brief.trust, source=brief.source)}"


def _allowed(names: list[str], level: int) -> list[str]:
    """The tools a run at `level` is given: at level 0 only those that read."""
    return [
        name
        for name in names
        if (tool := tool_registry.TOOLS.get(name)) is None or levels.allowed_at(tool, level)
    ]


def memory_scopes(mission: Mission) -> list[str]:
    """The memory a mission's runs see in their prompt: global, and their project's."""
    return ["global", *([f"project/{mission.project_id}"] if mission.project_id else [])]


def needs_a_model(*, stand_in: bool, provider: str = "") -> MissionError:
    """The refusal of a goal no model can pursue: where keys are set, and what runs without.
    `provider`: the one the executor's route names (a route a mission names is never replaced
    by another provider, so another being set does not help)."""
    offered = ", ".join(f"{m.key} ({m.goal.rstrip('.')})" for m in offline_missions.general())
    if not stand_in:
        why = "the offline model only plays the offline missions"
    elif provider and any(providers.ready(name) for name in providers.KEYS):
        why = f"the provider its route names, {provider}, cannot be called (no API key or endpoint)"
    else:
        why = "no provider can be called (no API key, or no endpoint)"
    return MissionError(
        f"This goal needs a language model, and {why}. Set a provider key in Settings, or start"
        f" an offline mission instead: {offered}.",
        code="no_provider",
        details={
            "settings": reverse("console:settings"),
            "offline": [m.key for m in offline_missions.general()],
        },
    )


MISSION_CAPS = (*CAP_FIELDS, "max_seconds", "max_concurrent_runs")
PROVIDERS = ("anthropic", "openai", "compatible", "scripted")
EFFORTS = ("low", "medium", "high")
MAX_GOAL = 20_000


def create_mission(
    *,
    project: Project,
    goal: str = "",
    definition_of_done: str = "",
    caps: dict[str, Any] | None = None,
    routes: dict[str, Any] | None = None,
    trigger: str,
    script: dict[str, Any] | None = None,
    offline: str | None = None,
    criteria: Any = None,
    risk_class: str = levels.DEFAULT_RISK_CLASS,
    mcp_servers: list[str] | None = None,
    bridges: Any = None,
    allowed_hosts: Any = None,
    sensitive: bool = False,
    brief: Brief | None = None,
    profile: str | None = None,
    profile_criteria: bool = True,
) -> tuple[Mission, Run]:
    """Create a mission and start its root run, or neither: the one entry point of the console
    form, the API, schedules and other agents (billing, journal and telemetry are the same
    whoever pulled the trigger).

    With `offline` (a key of `missions.offline.MISSIONS`), the offline model plays that mission
    on the project's repository: its goal and model are the offline mission's own.

    `criteria` is the definition of done as criteria (`missions.verification`), checked before
    anything else: the root run ends `done` only when each passes. `risk_class` (a key of
    `tools.levels.RISK_CLASSES`) sets the sandbox level its runs work at.

    `bridges` (names of API bridges, `cluster.bridges`) and `allowed_hosts` (`host`,
    `host:port`, shell-style globs) are what its sandboxes may reach besides the owner's egress
    rules (`missions.network`); `sensitive`: plan first, then read untrusted content. `brief`:
    text from outside the mission works on, given to the model as data after the goal
    (`with_brief`).

    `profile` (a `Profile`'s name, `missions.profiles`) fills what the mission leaves out and
    raises its level to the profile's; `profile_criteria=False` leaves its criteria templates
    out. Criteria come from the mission, else its project's defaults, else the profile's."""
    if criteria is None and offline is None and project.default_criteria:
        criteria = list(project.default_criteria)
    with_profile = profiles.get(profile) if profile is not None else None
    if with_profile is not None:
        if offline is not None:
            raise MissionError(
                "An offline mission has its own goal, model and checks: leave the profile out.",
                code="invalid_input",
            )
        applied = profiles.apply(
            with_profile,
            routes=routes or {},
            caps=caps or {},
            criteria=criteria,
            risk_class=risk_class,
            mcp_servers=mcp_servers or [],
            with_criteria=profile_criteria,
        )
        routes, caps, criteria = applied.routes, applied.caps, applied.criteria
        risk_class, mcp_servers = applied.risk_class, applied.mcp_servers
    clean_criteria = _criteria(criteria, project)
    clean_bridges, clean_hosts = _reach(bridges, allowed_hosts)
    if risk_class not in levels.RISK_CLASSES:
        raise MissionError(
            f"Unknown risk class {risk_class!r}: one of {', '.join(levels.RISK_CLASSES)}.",
            code="invalid_input",
        )
    if offline is not None and levels.level_for(risk_class) == 0:
        raise MissionError(
            "An offline mission runs the project's commands: its risk class cannot be research.",
            code="invalid_input",
        )
    if offline is not None:
        chosen = offline_missions.get(offline)
        if (
            (isinstance(goal, str) and goal.strip())
            or definition_of_done.strip()
            or routes
            or clean_criteria
        ):
            raise MissionError(
                "An offline mission has its own goal and model: leave the goal, the definition"
                " of done and the routes empty.",
                code="invalid_input",
            )
        if not project.repository:
            raise MissionError(
                "The offline missions run on a project's repository, and this project has none.",
                code="invalid_input",
            )
        if chosen.project and project.name != chosen.project:
            raise MissionError(
                f"The offline mission {offline} runs on the {chosen.project} project only.",
                code="invalid_input",
            )
        goal, definition_of_done = chosen.goal, chosen.definition_of_done
        routes = offline_missions.ROUTES
    goal = goal.strip() if isinstance(goal, str) else ""
    if not goal:
        raise MissionError("A mission needs a goal.", code="invalid_input")
    if len(goal) > MAX_GOAL:
        raise MissionError(f"A goal has at most {MAX_GOAL} characters.", code="invalid_input")
    clean_caps = _caps(caps or {})
    clean_routes = _routes(routes or {})
    clean_servers = mcp_server_names(mcp_servers or [])
    with transaction.atomic():
        mission = Mission.objects.create(
            project=project,
            mcp_servers=clean_servers,
            goal=goal,
            definition_of_done=definition_of_done.strip(),
            criteria=clean_criteria,
            risk_class=risk_class,
            routes=clean_routes,
            bridges=clean_bridges,
            allowed_hosts=clean_hosts,
            sensitive=bool(sensitive),
            profile=with_profile,
            **clean_caps,
        )
        run = start_mission(
            mission,
            trigger=trigger,
            script=script,
            offline=offline,
            criteria=clean_criteria,
            brief=brief,
        )
    return mission, run


def mcp_server_names(names: Any) -> list[str]:
    """The MCP servers a mission or project names, each registered and approved at least once."""
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise MissionError("mcp_servers is a list of server names.", code="invalid_input")
    known = {server.name: server for server in McpServer.objects.filter(name__in=names)}
    for name in names:
        server = known.get(name)
        if server is None:
            raise MissionError(f"No MCP server named {name!r}.", code="invalid_input")
        if server.approved_at is None:
            raise MissionError(
                f"The MCP server {name!r} was never approved: approve its tools first.",
                code="invalid_input",
            )
    return list(dict.fromkeys(names))


MAX_REACH = 50
HOST_PATTERN = re.compile(r"^[A-Za-z0-9*?.\[\]-]{1,253}(:[0-9*?]{1,5})?$")


def _reach(bridges: Any, hosts: Any) -> tuple[list[str], list[str]]:
    """The bridges and extra hosts a mission names, checked: each bridge exists, each host is
    `host` or `host:port` (globs allowed, never `*` alone: that would be the whole Internet)."""
    found: list[list[str]] = []
    for what, given in (("bridges", bridges), ("allowed_hosts", hosts)):
        given = [] if given is None else given
        if not isinstance(given, list) or len(given) > MAX_REACH:
            raise MissionError(
                f"{what} is a list of at most {MAX_REACH} names.", code="invalid_input"
            )
        if not all(isinstance(item, str) and item for item in given):
            raise MissionError(f"{what} holds non-empty strings only.", code="invalid_input")
        found.append(sorted(set(given)))
    unknown = [name for name in found[0] if not cluster_bridges.exists(name)]
    if unknown:
        raise MissionError(
            f"No bridge named {', '.join(unknown)}: the owner adds bridges in Settings.",
            code="invalid_input",
        )
    for host in found[1]:
        if not HOST_PATTERN.fullmatch(host) or host.split(":")[0].strip("*?.") == "":
            raise MissionError(
                f"{host!r} is not a host: host or host:port (globs allowed, never every host).",
                code="invalid_input",
            )
    return found[0], [host.lower() for host in found[1]]


def _criteria(criteria: Any, project: Project) -> list[dict[str, Any]]:
    """The definition of done as validated criteria ([] for none): a command oracle runs in
    the project's repository, so it needs one."""
    if criteria is None:
        return []
    clean = verification.validate(criteria)
    if not project.repository and any("command" in c["oracle"] for c in clean):
        raise verification.CriteriaError(
            "A criterion checked by a command runs it in the project's repository, and this"
            " project has none: use an evaluator oracle, or give the project a repository."
        )
    return clean


def _caps(caps: dict[str, Any]) -> dict[str, int | None]:
    """The budget caps are the kernel's (`validate_caps`), `max_seconds` the wall time of each
    of its root runs; a mission adds its concurrency cap. A spend, token or wall-time cap it
    does not name is the owner's default (`budgets.mission_defaults`), copied in: the mission
    shows the caps it is held to, and a later change of the defaults leaves it alone. Null
    names no cap."""
    caps = dict(caps)
    concurrent = caps.pop("max_concurrent_runs", None)
    clean = validate_caps(caps)
    for cap, default in budgets.mission_defaults().items():
        clean.setdefault(cap, default)
    if concurrent is not None:
        if isinstance(concurrent, bool) or not isinstance(concurrent, int) or concurrent < 1:
            raise MissionError(
                "Cap max_concurrent_runs must be an integer of at least 1.", code="invalid_budget"
            )
        clean["max_concurrent_runs"] = concurrent
    return clean


def _routes(routes: dict[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for role, route in routes.items():
        if role not in Role.values:
            raise MissionError(
                f"Unknown role {role!r}; roles: {', '.join(Role.values)}.", code="invalid_input"
            )
        if not isinstance(route, dict) or set(route) - {"provider", "model", "effort"}:
            raise MissionError(
                f"The route of {role} is {{provider, model, effort}}.", code="invalid_input"
            )
        provider, model = route.get("provider"), route.get("model")
        if provider not in PROVIDERS:
            raise MissionError(
                f"Unknown provider {provider!r}; providers: {', '.join(PROVIDERS)}.",
                code="invalid_input",
            )
        if not isinstance(model, str) or not model.strip() or len(model) > 100:
            raise MissionError(f"The route of {role} needs a model name.", code="invalid_input")
        effort = route.get("effort")
        if effort is not None and effort not in EFFORTS:
            raise MissionError(
                f"Unknown effort {effort!r}; efforts: {', '.join(EFFORTS)}.", code="invalid_input"
            )
        clean[role] = {"provider": provider, "model": model.strip(), "effort": effort}
    return clean
