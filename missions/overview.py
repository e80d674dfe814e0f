"""What the console shows of missions and their runs: states in the owner's words, the running
missions of Home, a mission's run tree. Read only; steering goes through `kernel.runs` and
`missions.steering`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, QuerySet
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from approvals import inbox
from kernel.models import TERMINAL, Artifact, Run, RunStatus, Wait, WaitKind
from missions import ledger
from missions.models import Fact, Mission, PlanItem, Project

# Pill colours by status: green for done, red for the ends that need a look, amber for what
# is paused or waits, grey for the rest (the classes are in console.css).
_CSS: dict[str, str] = {
    RunStatus.DONE: "up",
    RunStatus.FAILED: "down",
    RunStatus.BLOCKED: "down",
    RunStatus.BUDGET_EXHAUSTED: "down",
    RunStatus.PARTIAL: "stale",
    RunStatus.CANCELLED: "unknown",
    RunStatus.WAITING: "pending",
    RunStatus.RUNNING: "running",
    RunStatus.QUEUED: "unknown",
}


@dataclass(frozen=True)
class RunState:
    value: str  # the status, or "paused" / "stopping" when the owner's request is not yet seen
    label: str
    css: str


def state_of(run: Run) -> RunState:
    """A run's status as the owner needs it: an unfinished run may be paused or stopping."""
    if not run.is_terminal and run.cancel_requested:
        return RunState("stopping", _("stopping"), "stale")
    if not run.is_terminal and run.paused:
        return RunState("paused", _("paused"), "pending")
    if not run.is_terminal and run.needs_migration:
        return RunState("needs_migration", _("needs migration"), "down")
    return RunState(run.status, str(RunStatus(run.status).label), _CSS.get(run.status, "unknown"))


def role_of(run: Run) -> str:
    """Who the run is: the agent's role, else the kernel program it runs."""
    spec = run.input if isinstance(run.input, dict) else {}
    if run.program == "agent":
        return str(spec.get("role") or "executor")
    return run.program


def model_of(run: Run) -> str:
    """The run's model as `provider/model`; empty when the run has none (not an agent)."""
    spec = run.input if isinstance(run.input, dict) else {}
    model = run.model or str(spec.get("model") or "")
    provider = str(spec.get("provider") or "")
    return f"{provider}/{model}" if provider and model else model


def tokens_of(run: Run) -> int:
    return run.input_tokens + run.output_tokens + run.cache_read_tokens + run.cache_write_tokens


def cache_share_of(run: Run) -> int | None:
    """The percentage of the run's input tokens (uncached, read from the prompt cache and
    written to it; its sub-runs' included, as its ledger counts them) that were cache reads,
    rounded down so that it never reads better than it was; None before any input."""
    prompt = run.input_tokens + run.cache_read_tokens + run.cache_write_tokens
    return 100 * run.cache_read_tokens // prompt if prompt else None


# --- Home: running missions -----------------------------------------------------------------


@dataclass(frozen=True)
class RunningMission:
    run: Run
    mission: Mission
    goal: str
    state: RunState
    model: str
    tokens: int
    waits: int  # open owner waits in the run's tree


@dataclass(frozen=True)
class Running:
    items: list[RunningMission]
    more: int
    collected_at: datetime


def unfinished_roots() -> QuerySet[Run]:
    """Unfinished root runs of missions (runs charged to other kernel accounts are not the
    owner's missions)."""
    return Run.objects.filter(parent__isnull=True, account__mission__isnull=False).exclude(
        status__in=TERMINAL
    )


def running(*, limit: int = 20) -> Running:
    """Unfinished root runs (a mission may have several: forks are roots), newest first."""
    collected_at = timezone.now()
    roots = list(
        unfinished_roots().select_related("account__mission").order_by("-created_at", "-id")[:limit]
    )
    more = unfinished_roots().count() - limit if len(roots) == limit else 0
    waits = _open_waits_by_root([root.pk for root in roots])
    items = [
        RunningMission(
            run=root,
            mission=root.account.mission,
            goal=inbox.one_line(root.account.mission.goal, 140),
            state=state_of(root),
            model=model_of(root),
            tokens=tokens_of(root),
            waits=waits.get(root.pk, 0),
        )
        for root in roots
    ]
    return Running(items, max(0, more), collected_at)


def _open_waits_by_root(root_ids: list[int]) -> dict[int, int]:
    if not root_ids:
        return {}
    rows = (
        Wait.objects.filter(inbox.pending(), kind=WaitKind.HUMAN, run__root_id__in=root_ids)
        .values("run__root_id")
        .annotate(count=Count("id"))
    )
    return {row["run__root_id"]: row["count"] for row in rows if row["run__root_id"]}


# --- Mission: the run tree ------------------------------------------------------------------


@dataclass
class Node:
    run: Run
    state: RunState
    role: str
    model: str
    tokens: int
    depth: int
    forked_from: dict[str, Any] | None
    waits: list[dict[str, str]] = field(default_factory=list)  # open owner waits: label, url


@dataclass(frozen=True)
class Tree:
    nodes: list[Node]  # depth first, children in creation order
    unfinished: bool
    collected_at: datetime


def tree(mission: Mission) -> Tree:
    """Every run of the mission, each under its parent (roots include forks), in one query."""
    collected_at = timezone.now()
    runs = list(Run.objects.filter(account=mission).order_by("created_at", "id"))
    children: dict[int | None, list[Run]] = {}
    for run in runs:
        children.setdefault(run.parent_id, []).append(run)
    waits = _open_waits([run.pk for run in runs])
    nodes: list[Node] = []

    def visit(run: Run, depth: int) -> None:
        forked = run.contract.get("forked_from") if isinstance(run.contract, dict) else None
        nodes.append(
            Node(
                run=run,
                state=state_of(run),
                role=role_of(run),
                model=model_of(run),
                tokens=tokens_of(run),
                depth=depth,
                forked_from=forked if isinstance(forked, dict) else None,
                waits=waits.get(run.pk, []),
            )
        )
        for child in children.get(run.pk, []):
            visit(child, depth + 1)

    for root in children.get(None, []):
        visit(root, 0)
    unfinished = any(not run.is_terminal for run in runs)
    return Tree(nodes, unfinished, collected_at)


def _open_waits(run_ids: list[int]) -> dict[int, list[dict[str, str]]]:
    found: dict[int, list[dict[str, str]]] = {}
    if not run_ids:
        return found
    for wait in Wait.objects.filter(inbox.pending(), kind=WaitKind.HUMAN, run_id__in=run_ids):
        found.setdefault(wait.run_id, []).append(wait_link(wait))
    return found


def wait_link(wait: Wait) -> dict[str, str]:
    """Where the owner answers a human wait: its approval or its question page."""
    question = wait.question if isinstance(wait.question, dict) else {}
    if question.get("type") == "approval":
        return {
            "label": _("approval: %(tool)s") % {"tool": question.get("tool", "")},
            "url": reverse("console:approval", args=[wait.pk]),
        }
    return {"label": _("question"), "url": reverse("console:question", args=[wait.pk])}


def artifacts(mission: Mission, *, limit: int = 200) -> list[Artifact]:
    return list(
        Artifact.objects.filter(run__account=mission)
        .select_related("run")
        .order_by("-created_at", "-id")[:limit]
    )


# --- Missions list --------------------------------------------------------------------------


@dataclass(frozen=True)
class MissionRow:
    mission: Mission
    goal: str
    state: RunState | None  # its outcome (`mission_state`); None: no run yet
    usd_micros: int
    tokens: int
    runs: int


def mission_state(roots: list[Run]) -> RunState | None:
    """A mission's state is its outcome: done once a root run (the first, or a fork) ended done,
    whatever later forks did; until then, its latest root run's state. None: no run yet."""
    done = next((run for run in roots if run.status == RunStatus.DONE), None)
    if done is not None:
        return state_of(done)
    return state_of(roots[-1]) if roots else None


def roots_by_mission(mission_ids: list[int]) -> dict[int, list[Run]]:
    """Each mission's root runs, oldest first (what `mission_state` reads), in one query."""
    roots: dict[int, list[Run]] = {}
    for run in Run.objects.filter(account_id__in=mission_ids, parent__isnull=True).order_by(
        "created_at", "id"
    ):
        roots.setdefault(run.account_id, []).append(run)
    return roots


def missions(*, limit: int = 100, project: Project | None = None) -> list[MissionRow]:
    """Missions newest first (of `project` only, if given), each with its state
    (`mission_state`) and its spend (the sum of its root runs' ledgers, which count their
    subtrees)."""
    chosen = Mission.objects.select_related("project")
    if project is not None:
        chosen = chosen.filter(project=project)
    found = list(chosen.order_by("-created_at", "-id")[:limit])
    roots = roots_by_mission([m.pk for m in found])
    rows = []
    for mission in found:
        own = roots.get(mission.pk, [])
        rows.append(
            MissionRow(
                mission=mission,
                goal=inbox.one_line(mission.goal, 160),
                state=mission_state(own),
                usd_micros=sum(run.usd_micros for run in own),
                tokens=sum(tokens_of(run) for run in own),
                runs=len(own),
            )
        )
    return rows


# --- Mission: the supervisor ledger ---------------------------------------------------------

_ITEM_CSS: dict[str, str] = {
    PlanItem.Status.TODO: "unknown",
    PlanItem.Status.DOING: "running",
    PlanItem.Status.DONE: "up",
    PlanItem.Status.FAILED: "down",
}


@dataclass(frozen=True)
class PlanRow:
    item: PlanItem
    label: str  # its status, in the owner's words
    css: str
    proof: list[tuple[str, list[str]]]  # (what, the values given), in a fixed order


@dataclass(frozen=True)
class LedgerView:
    items: list[PlanRow]
    facts: list[Fact]
    done: int


def ledger_of(mission: Mission) -> LedgerView:
    """The mission's plan items with their proof, and its facts (`missions.ledger`)."""
    found = ledger.of(mission.pk)
    labels = {
        "commands": _("Commands run"),
        "tests": _("Tests passed"),
        "files": _("Files"),
        "events": _("Events"),
    }
    rows = [
        PlanRow(
            item=item,
            label=str(PlanItem.Status(item.status).label),
            css=_ITEM_CSS.get(item.status, "unknown"),
            proof=[
                (labels[kind], [str(value) for value in item.proof[kind]])
                for kind in ledger.PROOF_KINDS
                if isinstance(item.proof, dict) and item.proof.get(kind)
            ],
        )
        for item in found.items
    ]
    return LedgerView(rows, found.facts, found.done)
