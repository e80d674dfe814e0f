"""Running a suite: each task a project and a mission made through the one launch path (journal,
billing, routes: the offline model plays the task's script unless a provider key is set), driven
to its end by an in-process kernel worker, then judged by its oracle. The table says per task how
it ended, the oracle's verdict, tokens, cost and wall time, then the totals; its last line is
machine-readable.

A task is completed when its oracle passes, whatever the mission said about itself.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db.models import Min
from django.utils import timezone

from kernel import runs
from kernel.models import TERMINAL, Run, RunStatus
from kernel.worker import Worker
from missions.evals import oracle, outcomes, plays, site
from missions.evals.suite import GITIGNORE, Suite, Task
from missions.launch import create_mission
from missions.models import Mission, Profile, Project
from tools import workspace

logger = logging.getLogger(__name__)

TASK_SECONDS = 1800  # a mission still unfinished then is stopped and judged as it is
POLL_SECONDS = 0.5  # between looks while a run is held elsewhere (its lease), within the deadline
MODE_LINES = {
    "single": "Work alone: do not delegate to sub-agents.",
    "multi": (
        "Work as a supervisor: hand the reading, searching and checking to sub-agents with the"
        " delegate tool (each with its done criteria), then integrate their results and check"
        " them before you finish."
    ),
}


class ModeUnavailable(Exception):
    """The mode asked cannot run on this installation: the whole evaluation stops."""


@dataclass(frozen=True)
class Result:
    task: Task
    status: str  # how the mission's root run ended (or `waiting`, stopped at the deadline)
    passed: bool  # the oracle's verdict: the task is completed
    detail: str
    tokens: int
    usd_micros: int
    seconds: float
    model: str = ""
    mission_id: int | None = None


def attempt_base(suite: Suite, mode: str) -> Path:
    """Where this attempt's repositories are made: fresh ones, never reused."""
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    return workspace.root() / "evals" / f"{suite.name}-{mode}-{stamp}-{uuid.uuid4().hex[:6]}"


def materialise(task: Task, path: Path) -> Path:
    """The task's files as a fresh git repository of one commit (host git on our own files)."""
    path.mkdir(parents=True)
    files = {".gitignore": GITIGNORE.encode(), **task.files}
    for rel, content in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    workspace.host_git(path, "init", "--quiet", "--initial-branch=main")
    workspace.host_git(path, "add", "--all")
    workspace.host_git(path, "commit", "--quiet", "-m", f"{task.title} (as given)")
    return path


def goal_of(task: Task, mode: str) -> str:
    return f"{task.goal}\n\n{MODE_LINES[mode]}"


def run_suite(
    suite: Suite,
    tasks: list[Task],
    *,
    mode: str,
    budget: int | None,
    say: Callable[[str], None],
    profile: Profile | None = None,
) -> list[Result]:
    """Each task in turn, its outcome recorded (`outcomes.record`) under `profile`, which each
    mission starts with (`missions.profiles`) when given."""
    base = attempt_base(suite, mode)
    say(
        f"mission_eval: suite {suite.name}, {len(tasks)} task(s), mode {mode}, budget"
        f" {f'{budget:,} tokens' if budget else 'none'} per mission,"
        f" profile {profile.name if profile else 'none'}; repositories in {base}"
    )
    say(HEADER)
    results = []
    with site.egress_running(any(task.site for task in tasks)):
        for task in tasks:
            result = run_task(
                task,
                suite=suite.name,
                mode=mode,
                budget=budget,
                base=base,
                profile=profile.name if profile else None,
            )
            outcomes.record(result, suite=suite.name, mode=mode, profile=profile)
            say(row(result))
            results.append(result)
    for line in summary(results, suite=suite.name, mode=mode):
        say(line)
    return results


def run_task(
    task: Task,
    *,
    suite: str,
    mode: str,
    budget: int | None,
    base: Path,
    profile: str | None = None,
) -> Result:
    started = time.monotonic()
    mission: Mission | None = None
    try:
        # The task's site, while it runs: its mission may reach that host, and nothing more.
        with site.serving(task.site) as pages:
            script, goal = task.script(mode), goal_of(task, mode)
            if pages is not None:
                script, goal = plays.at_site([script, goal], pages.url)
            repo = materialise(task, base / task.name)
            project = Project.objects.create(
                name=f"eval {base.name}/{task.name}"[:120],
                description=f"Evaluation task ({task.kind}): {task.title}",
                repository=str(repo),
            )
            mission, run = create_mission(
                project=project,
                goal=goal,
                definition_of_done="\n".join(task.done),
                caps={"max_tokens": budget} if budget else {},
                trigger="eval",
                script=script,
                allowed_hosts=[pages.host] if pages is not None else None,
                # The task's oracle judges it: the profile's criteria templates would ask an
                # evaluator model the offline model does not play.
                profile=profile,
                profile_criteria=False,
            )
            if mode == "multi" and "delegate" not in run.input.get("tools", []):
                runs.stop_account(mission.pk, by="mission_eval")
                Worker().run_until_idle()
                raise ModeUnavailable(
                    "The multi mode needs the delegate tool, and the launch path does not give it"
                    f" to a mission's agent (mission {mission.pk} was stopped); run --mode single."
                )
            deadline = timezone.now() + timedelta(seconds=TASK_SECONDS)
            status = drive(mission, run, deadline=deadline)
            run.refresh_from_db()
            verdict = judge(task, run, pages)
        return _result(task, mission, status, verdict, started, model=run.model)
    except ModeUnavailable:
        raise
    except Exception as error:  # one task's crash is that task's result, not the suite's end
        logger.exception("evaluation task %s failed to run", task.name)
        verdict = oracle.Verdict(False, f"could not run: {type(error).__name__}: {error}")
        return _result(task, mission, "error", verdict, started)


def drive(mission: Mission, run: Run, *, deadline: datetime) -> str:
    """Execute the mission's runs in this process until its root run ends; one still waiting
    (for the owner, or past the deadline) is stopped, and its status then is returned."""
    worker = Worker()
    while True:
        worker.run_until_idle()
        run.refresh_from_db()
        if run.status in TERMINAL:
            return str(run.status)
        # Unfinished: a timer (a retry's back-off), a lease held elsewhere, or the owner.
        due = (
            Run.objects.filter(account_id=mission.pk, paused=False)
            .exclude(status__in=TERMINAL)
            .aggregate(due=Min("runnable_at"))["due"]
        )
        now = timezone.now()
        if due is None or due > deadline or now > deadline:
            break
        time.sleep(min(max((due - now).total_seconds(), POLL_SECONDS), 60.0))
    status = str(run.status)
    runs.stop_account(mission.pk, by="mission_eval")
    worker.run_until_idle()
    return status


def judge(task: Task, run: Run, pages: site.Site | None = None) -> oracle.Verdict:
    if task.kind == "coding":
        if not run.workspace:
            return oracle.Verdict(False, "the mission's run made no worktree")
        return oracle.run_tests(Path(run.workspace), run.pk, task.test_command, task.protected())
    output: Any = run.output if isinstance(run.output, dict) else {}
    if run.status != RunStatus.DONE:
        return oracle.Verdict(False, f"the mission ended {run.status}, without an answer")
    return judge_answer(task, output.get("answer"), pages)


def judge_answer(task: Task, answer: str | None, pages: site.Site | None) -> oracle.Verdict:
    """The oracle of an answering task on its final answer; `pages`: the task's site."""
    if task.kind == "figures":
        return oracle.check_figures(answer, task.oracle["figures"])
    if task.kind == "citations":
        sources = task.oracle["sources"]
        if pages is not None:
            sources = plays.at_site(sources, pages.url)

        def fetch(where: str) -> str | None:
            if plays.is_url(where):
                return pages.text(where) if pages is not None else None
            content = task.files.get(where)  # as shipped: never the mission's own copy
            return content.decode(errors="replace") if content is not None else None

        return oracle.check_citations(
            answer,
            expected=task.expected(),
            sources=sources,
            fetch=fetch,
            minimum=int(task.oracle.get("min_citations", 1)),
        )
    return oracle.check_answer(answer, task.expected())


def _result(
    task: Task,
    mission: Mission | None,
    status: str,
    verdict: oracle.Verdict,
    started: float,
    *,
    model: str = "",
) -> Result:
    spent = mission.spent() if mission is not None else {"tokens": 0, "usd_micros": 0}
    return Result(
        task=task,
        status=status,
        passed=verdict.passed,
        detail=verdict.detail,
        tokens=spent["tokens"],
        usd_micros=spent["usd_micros"],
        seconds=time.monotonic() - started,
        model=model,
        mission_id=mission.pk if mission is not None else None,
    )


# --- The table ----------------------------------------------------------------------------------

COLUMNS = "{:<28} {:<9} {:<17} {:<6} {:>10} {:>10} {:>8}"
HEADER = COLUMNS.format("task", "kind", "status", "oracle", "tokens", "cost $", "wall s")


def row(result: Result) -> str:
    return COLUMNS.format(
        result.task.name[:28],
        result.task.kind,
        result.status[:17],
        "pass" if result.passed else "FAIL",
        f"{result.tokens:,}",
        f"{result.usd_micros / 1e6:.4f}",
        f"{result.seconds:.1f}",
    )


def summary(results: list[Result], *, suite: str, mode: str) -> list[str]:
    completed = sum(result.passed for result in results)
    tokens = sum(result.tokens for result in results)
    usd = sum(result.usd_micros for result in results) / 1e6
    wall = sum(result.seconds for result in results)
    rate = completed / len(results) if results else 0.0
    per_tokens = f"{tokens / completed:.0f}" if completed else "none"
    per_cost = f"{usd / completed:.6f}" if completed else "none"
    models = sorted({result.model for result in results if result.model})
    lines = []
    failed = [result for result in results if not result.passed]
    if failed:
        lines.append("Not completed (the oracle's verdict):")
        for result in failed:
            lines.append(f"  {result.task.name} ({result.status}):")
            lines.extend(f"    {line}" for line in result.detail.splitlines() or [""])
    lines.append(
        f"completed {completed}/{len(results)} ({rate:.0%}); tokens per completed task"
        f" {per_tokens}; cost per completed task {per_cost if completed else 'none'} $;"
        f" {tokens:,} tokens and {usd:.4f} $ in all; wall time {wall:.1f} s;"
        f" model {', '.join(models) or 'none'}"
    )
    lines.append(
        f"mission_eval suite={suite} mode={mode} tasks={len(results)} completed={completed}"
        f" rate={rate:.3f} tokens_per_completed={per_tokens} cost_per_completed={per_cost}"
        f" wall_s={wall:.1f}"
    )
    return lines
