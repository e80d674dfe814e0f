"""Domain profiles: checking one before it is stored, and applying one when a mission starts.

A profile is applied in two halves (docs/design.md §5). At creation, `apply` (from
`launch.create_mission`) decides what the mission records: the profile's routes under the
mission's own, the higher of the profile's sandbox level and the risk class's, its criteria
templates when the mission gives none, its caps where the mission names none, its MCP servers
with the mission's. At each start of a root run, `narrow` (from `launch.start_mission`) keeps only
the profile's tools and skills when it lists some. A profile only ever takes tools away: the
harness still judges each call (docs/design.md §13), and the level never drops below what the
mission's risk class requires (§14).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agentos.core import audit
from agentos.core.models import AuditEvent
from memory import skills as memory_skills
from missions import routing, verification
from missions.errors import MissionError
from missions.models import Profile, Role
from tools import levels
from tools import registry as tool_registry
from tools.mcp.models import McpServer

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
PROVIDERS = ("anthropic", "openai", "compatible", "scripted")
EFFORTS = ("low", "medium", "high")
CAPS = ("max_tokens", "max_usd_micros", "max_seconds")
CAP_LIMITS = {"max_tokens": 2**63 - 1, "max_usd_micros": 2**63 - 1, "max_seconds": 2**31 - 1}
MAX_ITEMS = 100
MAX_CRITERIA = 20
MAX_LINE = 2000
MAX_DESCRIPTION = 2000
# The risk class whose level a mission ends up at (`tools.levels.RISK_CLASSES` read backwards).
CLASS_OF_LEVEL = {level: name for name, level in levels.RISK_CLASSES.items()}
FIELDS = (
    "description",
    "routes",
    "tools",
    "mcp_servers",
    "skills",
    "sandbox_level",
    "criteria",
    *CAPS,
)


def known() -> list[str]:
    return list(Profile.objects.order_by("name").values_list("name", flat=True))


def get(name: Any) -> Profile:
    """The profile named `name`; 422 naming the known ones otherwise."""
    found = Profile.objects.filter(name=name).first() if isinstance(name, str) else None
    if found is None:
        names = known()
        said = f"No profile {name!r}; profiles: {', '.join(names) or 'none yet'}."
        raise MissionError(
            said,
            code="invalid_input",
            status=422,
            details={"fields": {"profile": [said]}, "profiles": names},
        )
    return found


# --- applying one -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Applied:
    """A mission's settings once its profile is applied (`create_mission` checks them all)."""

    routes: dict[str, Any]
    caps: dict[str, Any]
    criteria: Any
    risk_class: str
    mcp_servers: list[str]


def apply(
    profile: Profile,
    *,
    routes: dict[str, Any],
    caps: dict[str, Any],
    criteria: Any,
    risk_class: str,
    mcp_servers: list[str],
    with_criteria: bool = True,
) -> Applied:
    """What the mission is created with. What it names wins, except its level, which is the
    higher of its risk class's and the profile's. `with_criteria=False`: the criteria templates
    are left out (an evaluation task is judged by its own oracle, `missions.evals`)."""
    merged_caps = dict(caps)
    for cap in CAPS:
        if cap not in merged_caps and getattr(profile, cap) is not None:
            merged_caps[cap] = getattr(profile, cap)
    if criteria is None and with_criteria and profile.criteria:
        criteria = verification.from_lines("\n".join(profile.criteria))
    # An unknown risk class is left as given: `create_mission` refuses it with its own words.
    if risk_class in levels.RISK_CLASSES:
        level = max(levels.RISK_CLASSES[risk_class], profile.sandbox_level)
        risk_class = CLASS_OF_LEVEL.get(level, risk_class)
    if isinstance(mcp_servers, list):  # anything else is refused by `create_mission`
        mcp_servers = list(dict.fromkeys([*mcp_servers, *profile.mcp_servers]))
    return Applied(
        routes={**_resolved(profile.routes), **routes},
        caps=merged_caps,
        criteria=criteria,
        risk_class=risk_class,
        mcp_servers=mcp_servers,
    )


def _resolved(routes: dict[str, Any]) -> dict[str, Any]:
    """The profile's routes as a mission records them: an effort alone is the role's default
    model at that effort, as the defaults stand now (a role without a default is left out)."""
    resolved: dict[str, Any] = {}
    for role, route in (routes or {}).items():
        if "provider" in route:
            resolved[role] = {**route, "effort": route.get("effort")}
            continue
        default = routing.default_route(role)
        if default is not None:
            resolved[role] = {
                "provider": default.provider,
                "model": default.model,
                "effort": route.get("effort") or default.effort,
            }
    return resolved


def narrow(spec: dict[str, Any], profile: Profile | None) -> None:
    """Keep only the profile's tools and skills in a root run's input (an empty list keeps
    all). `load_skill` goes with the skills: it stays while a skill is offered."""
    if profile is None:
        return
    if profile.tools:
        allowed = {*profile.tools, "load_skill"}
        spec["tools"] = [name for name in spec["tools"] if name in allowed]
    if profile.skills and spec.get("skills"):
        wanted = set(profile.skills)
        spec["skills"] = [skill for skill in spec["skills"] if skill["name"] in wanted]
        if not spec["skills"]:
            del spec["skills"]
            spec["tools"] = [name for name in spec["tools"] if name != "load_skill"]


# --- checking and saving one --------------------------------------------------------------------


def validate(values: dict[str, Any]) -> dict[str, Any]:
    """A profile's fields as stored, or a 422 `invalid_input` naming each wrong field (nothing
    is written). Absent fields take a new profile's defaults."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise _invalid({name: ["Not a field of a profile."] for name in unknown})
    problems: dict[str, list[str]] = {}
    clean: dict[str, Any] = {}
    checks = {
        "description": _description,
        "routes": _routes,
        "tools": _tools,
        "mcp_servers": _servers,
        "skills": _skills,
        "sandbox_level": _level,
        "criteria": _criteria,
        **dict.fromkeys(CAPS, _cap),
    }
    defaults: dict[str, Any] = {"description": "", "routes": {}, "sandbox_level": 1}
    for name, check in checks.items():
        value = values.get(name, defaults.get(name, [] if name in _LISTS else None))
        try:
            clean[name] = check(name, value)
        except ValueError as error:
            problems.setdefault(name, []).append(str(error))
    if problems:
        raise _invalid(problems)
    return clean


_LISTS = ("tools", "mcp_servers", "skills", "criteria")


def save(name: str, values: dict[str, Any], *, actor: audit.Actor, create: bool = False) -> Profile:
    """Create (`create`) or change the profile `name`, with its `policy.changed` event in the
    same transaction. Missions already started keep what they were created with."""
    if not isinstance(name, str) or not NAME.match(name):
        raise _invalid(
            {"name": ["1 to 40 lowercase letters, digits or '-', starting with a letter or digit."]}
        )
    clean = validate(values)
    with transaction.atomic():
        if create:
            if Profile.objects.filter(name=name).exists():
                raise _invalid({"name": [f"A profile named {name} exists already."]})
            profile = Profile.objects.create(name=name, **clean)
        else:
            profile = Profile.objects.select_for_update().filter(name=name).first() or get(name)
            for field, value in clean.items():
                setattr(profile, field, value)
            profile.save()
        audit.record_by(AuditEvent.Kind.POLICY_CHANGED, actor, profile=name, **clean)
    return profile


def _invalid(fields: dict[str, list[str]]) -> MissionError:
    return MissionError(
        "The profile is not valid: "
        + "; ".join(f"{name}: {' '.join(said)}" for name, said in fields.items()),
        code="invalid_input",
        status=422,
        details={"fields": fields},
    )


def _description(_name: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > MAX_DESCRIPTION:
        raise ValueError(f"A text of at most {MAX_DESCRIPTION} characters.")
    return value.strip()


def _strings(value: Any, *, pattern: re.Pattern[str] | None = None) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise ValueError(f"A list of at most {MAX_ITEMS} names.")
    if not all(isinstance(item, str) and item.strip() for item in value):
        raise ValueError("Names are non-empty strings.")
    names = list(dict.fromkeys(item.strip() for item in value))
    wrong = [name for name in names if pattern is not None and not pattern.fullmatch(name)]
    if wrong:
        raise ValueError(f"Not a name: {', '.join(wrong)}.")
    return names


def _tools(_name: str, value: Any) -> list[str]:
    names = _strings(value)
    unknown = [name for name in names if name not in tool_registry.TOOLS]
    if unknown:
        every = ", ".join(sorted(tool_registry.TOOLS.names()))
        raise ValueError(f"No tool named {', '.join(unknown)}; tools: {every}.")
    return names


def _servers(_name: str, value: Any) -> list[str]:
    names = _strings(value)
    approved = set(
        McpServer.objects.filter(name__in=names, approved_at__isnull=False).values_list(
            "name", flat=True
        )
    )
    missing = [name for name in names if name not in approved]
    if missing:
        raise ValueError(f"No approved MCP server named {', '.join(missing)}.")
    return names


def _skills(_name: str, value: Any) -> list[str]:
    return _strings(value, pattern=memory_skills.NAME)


def _level(_name: str, value: Any) -> int:
    offered = sorted(CLASS_OF_LEVEL)
    if isinstance(value, bool) or value not in offered:
        raise ValueError(f"One of {', '.join(str(level) for level in offered)}.")
    return int(value)


def _criteria(_name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_CRITERIA:
        raise ValueError(f"A list of at most {MAX_CRITERIA} lines.")
    lines = [line.strip() for line in value if isinstance(line, str)]
    if len(lines) != len(value) or not all(lines):
        raise ValueError("Each criterion is a non-empty line.")
    if any("\n" in line or len(line) > MAX_LINE for line in lines):
        raise ValueError(f"Each criterion is one line of at most {MAX_LINE} characters.")
    if not lines:
        return []
    try:
        verification.validate(verification.from_lines("\n".join(lines)))
    except verification.CriteriaError as error:
        raise ValueError(error.message) from None
    return lines


def _cap(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= CAP_LIMITS[name]:
        raise ValueError(f"An integer from 1 to {CAP_LIMITS[name]}, or null for none.")
    return value


def _routes(_name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("An object of routes by role.")
    clean: dict[str, Any] = {}
    for role, route in value.items():
        if role not in Role.values:
            raise ValueError(f"Unknown role {role!r}; roles: {', '.join(Role.values)}.")
        if not isinstance(route, dict) or not route or set(route) - {"provider", "model", "effort"}:
            raise ValueError(f"The route of {role} is {{provider, model, effort}} or {{effort}}.")
        effort = route.get("effort")
        if effort is not None and effort not in EFFORTS:
            raise ValueError(f"Unknown effort {effort!r}; efforts: {', '.join(EFFORTS)}.")
        if "provider" not in route and "model" not in route:
            if effort is None:
                raise ValueError(f"The route of {role} needs a model or an effort.")
            clean[role] = {"effort": effort}
            continue
        provider, model = route.get("provider"), route.get("model")
        if provider not in PROVIDERS:
            raise ValueError(f"Unknown provider {provider!r}; providers: {', '.join(PROVIDERS)}.")
        if not isinstance(model, str) or not model.strip() or len(model) > 100:
            raise ValueError(f"The route of {role} needs a model name.")
        clean[role] = {"provider": provider, "model": model.strip(), "effort": effort}
    return clean
