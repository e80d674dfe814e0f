"""The workspace chaos cases: coding runs (the agent program, the scripted model, a real git
worktree in the sandbox) whose worker processes SIGKILL themselves at crash points.

- `shell_append_case`: a shell append killed after its effect and before its result leaves one
  line after the resume (the worktree is put back to its checkpoint before the replay);
- `fork_case`: a fork from step N works in a worktree of its own equal to the checkpoint after
  step N (its worker killed right after making it, then mid-write), and the source's worktree
  is untouched;
- `engine_bump_case`: the engine version bumped while a coding run is in flight (its worker
  killed mid-step): the new deployment parks it as "needs migration", a later one declaring the
  old journal compatible resumes it; never is it left unclaimed;
- `node_runner_case`: shell steps on three SSH nodes whose runners are SIGKILLed mid-step: each
  step is placed again elsewhere once its first attempt's writes are undone, applied once;
- `supervisor_case`: the supervisor scenario (`missions.scenarios`: readers, writers merged, a
  definition of done) killed at every step of its supervisor and inside its children ends as
  its crash-free twin did: no child spawned or run twice, no merge doubled.

They live above the kernel (they start missions and read worktrees, which the kernel must not
import); `manage.py chaos` finds them through `settings.CHAOS_CASES` and adds their kills and
violations to its report; tests/chaos/test_quick_matrix.py runs each on its own.

Each crash target is aimed by seq, and seqs depend on the engine's step layout: each case learns
them from a crash-free twin of its run (the program is deterministic), never from a constant.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connection

from agentos import database, vault
from kernel import programs, runs
from kernel.models import Effect, Event, Run, RunStatus, Step, StepKind
from kernel.proving.chaos import Report
from missions import demo, launch, projects, scenarios
from tools import checkpoints, workspace

APPEND = "echo appended >> log.txt; wc -l < log.txt"
FINISH = {"text": "Finished."}
SCRIPTED = {"executor": {"provider": "scripted", "model": "scripted"}}
# The crash workers' lease: short, though a killed worker's runs are taken at once anyway (its
# death is proven, `kernel.holders`).
WORKER_OPTIONS = ("--lease", "2", "--poll", "0.2")
RUN_SECONDS = 90.0  # a coding run of a few scripted turns, from claim to end
PARK_SECONDS = 15.0  # a deployment's first claim cycles, from its start


class CaseFailed(Exception):
    """The case cannot go on (a deadline passed, a worker died unasked): one violation."""


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """One model turn calling these tools in order."""
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in pairs]}


def shell(command: str) -> dict[str, Any]:
    return calls(("shell", {"command": command}))


@dataclass
class Lab:
    """One case's world: a fresh demo repository, the worker processes it started (stopped at
    the end, whatever happened), the runs it made, its report."""

    name: str
    report: Report
    say: Callable[[str], None]
    base: Path  # the demo repositories, where the sandbox users can reach them
    data: Path  # the workers' data dir: crash plans, fired markers, logs
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    run_ids: list[int] = field(default_factory=list)
    repo: Path = field(init=False)

    def __post_init__(self) -> None:
        self.repo = demo.create_repositories(self.base)

    def start(self, turns: list[dict[str, Any]]) -> Run:
        """A coding mission on the repository, its run playing `turns` (queued, not claimed)."""
        project = projects.create_project(
            name=f"chaos {self.name} {uuid.uuid4().hex[:8]}", repository=str(self.repo)
        )
        _, run = launch.create_mission(
            project=project,
            goal="Do as told.",
            routes=SCRIPTED,
            trigger="chaos",
            script={"turns": turns},
        )
        self.run_ids.append(run.pk)
        return run

    def worker(
        self,
        targets: Sequence[tuple[Run, str, int]] = (),
        *,
        engine: str | None = None,
        compatible: dict[str, list[str]] | None = None,
    ) -> subprocess.Popen[bytes]:
        """A kernel worker process that SIGKILLs itself at `targets` (run, crash point, seq);
        with `engine`, a worker of another deployment: that engine version, and `compatible`
        the earlier versions its programs declare they resume."""
        number = len(self.workers) + 1
        plan = self.data / f"plan-{number}.json"
        plan.write_text(
            json.dumps(
                {
                    "targets": [{"run": r.pk, "point": p, "seq": s} for r, p, s in targets],
                    "fired_dir": str(self.data / "fired"),
                }
            )
        )
        env = {
            **{k: v for k, v in os.environ.items() if k != "AGENTOS_LEASE_SECONDS"},
            "DJANGO_SETTINGS_MODULE": "agentos.settings",
            "DATABASE_URL": database.build_url(connection.settings_dict),
            "AGENTOS_DATA_DIR": str(self.data),
            # The worktrees are this process's (the command's or the test's), not the data dir's.
            "AGENTOS_WORKSPACES_DIR": str(workspace.root()),
            "KERNEL_CRASHPLAN": str(plan),
        }
        if engine is None:
            argv = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "kernel_worker"]
        else:
            declared = json.dumps({"engine": engine, "compatible": compatible or {}})
            argv = [sys.executable, "-c", DEPLOYMENT, declared]
        with (self.data / f"worker-{number}.log").open("wb") as log:
            process = subprocess.Popen(  # noqa: S603  # this interpreter, our arguments
                [*argv, *WORKER_OPTIONS],
                cwd=settings.BASE_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(process)
        return process

    def killed(self, process: subprocess.Popen[bytes], where: str) -> None:
        """Wait for `process` to SIGKILL itself at its crash point: one kill."""
        try:
            code = process.wait(timeout=RUN_SECONDS)
        except subprocess.TimeoutExpired:
            raise CaseFailed(f"no worker died {where} within {RUN_SECONDS:.0f} s") from None
        if code != -signal.SIGKILL:
            raise CaseFailed(f"the worker meant to die {where} exited {code}{self.log(process)}")
        self.report.kills += 1

    def finish(
        self, run: Run, process: subprocess.Popen[bytes], *, seconds: float = RUN_SECONDS
    ) -> Run:
        """Wait for `run` to end on `process`, then stop the worker."""
        self.until(
            f"run {run.pk} to end",
            lambda: Run.objects.filter(pk=run.pk, finished_at__isnull=False).exists(),
            process,
            timeout=seconds,
        )
        self.stop(process)
        run.refresh_from_db()
        return run

    def until(
        self,
        what: str,
        condition: Callable[[], bool],
        process: subprocess.Popen[bytes],
        *,
        timeout: float,
    ) -> None:
        """Poll the database (there is no event to await across processes) until `condition`,
        while `process` lives, for at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if process.poll() is not None:
                raise CaseFailed(
                    f"waiting for {what}: the worker exited {process.returncode}{self.log(process)}"
                )
            if time.monotonic() >= deadline:
                raise CaseFailed(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.05)

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log(self, process: subprocess.Popen[bytes]) -> str:
        path = self.data / f"worker-{self.workers.index(process) + 1}.log"
        tail = path.read_text(errors="replace")[-1500:] if path.exists() else ""
        return f"; its log ends:\n{tail}" if tail else ""

    def expect(self, condition: bool, violation: str) -> None:
        if not condition:
            self.report.violations.append(violation)


@contextmanager
def lab(name: str, say: Callable[[str], None]) -> Iterator[Lab]:
    """A case's `Lab`; a failure to go on is one violation, and every worker is stopped."""
    report = Report()
    data = Path(tempfile.mkdtemp(prefix=f"agentos-chaos-{name.replace(' ', '-')}-"))
    (data / "fired").mkdir()
    # The workers read what this process's vault encrypted (the cluster's SSH key): same keys,
    # made now if this data dir has none yet (else each worker would make keys of its own).
    vault.ensure()
    keys = Path(settings.DATA_DIR) / vault.FILE_NAME
    if keys.exists():
        shutil.copy2(keys, data / vault.FILE_NAME)
    base = workspace.root() / "chaos" / uuid.uuid4().hex[:8]
    case = Lab(name=name, report=report, say=say, base=base, data=data)
    started = time.monotonic()
    try:
        yield case
    except CaseFailed as failure:
        report.violations.append(str(failure))
    except Exception as error:  # a case that broke is a violation: make chaos reports the rest
        report.violations.append(f"the case broke: {error!r}")
    finally:
        for process in case.workers:
            case.stop(process)
        report.runs = len(case.run_ids)
        report.steps = Step.objects.filter(run_id__in=case.run_ids).count()
        # Every step of a run that ended has its result: nothing was left half-recorded.
        for step in Step.objects.filter(
            run_id__in=case.run_ids, run__status=RunStatus.DONE, finished_at__isnull=True
        ):
            report.violations.append(f"run {step.run_id} step {step.seq} has no result")
        say(f"{name}: {report.line()} ({time.monotonic() - started:.0f} s)")
        shutil.rmtree(base, ignore_errors=True)  # the runs ended: their repository can go
        if report.violations:
            say(f"{name}: the workers' plans and logs are kept in {data}")
        else:
            shutil.rmtree(data, ignore_errors=True)


def seqs(run: Run, name: str) -> list[int]:
    return list(
        Step.objects.filter(run=run, name=name).order_by("seq").values_list("seq", flat=True)
    )


def tool_outputs(run: Run, name: str) -> list[str]:
    results = (
        Step.objects.filter(run=run, name=name).order_by("seq").values_list("result", flat=True)
    )
    return [str(r.get("output", "")) if isinstance(r, dict) else "" for r in results]


# --- (a) A shell append killed between its effect and its result -----------------------------


def shell_append_case(*, say: Callable[[str], None] = print) -> Report:
    """1. A crash-free twin finds the shell step's seq.
    2. A worker appends a line, and SIGKILLs itself before recording the result.
    3. Another resumes the run: the replay puts the worktree back to its checkpoint, then
       appends again: one line, and the shell says 1."""
    with lab("shell append", say) as case:
        script = [shell(APPEND), FINISH]
        twin = case.finish(case.start(script), case.worker())
        (seq,) = seqs(twin, "shell")
        run = case.start(script)
        case.killed(case.worker([(run, "after_effect_before_result", seq)]), "after the append")
        run.refresh_from_db()
        step = Step.objects.get(run=run, seq=seq)
        case.expect(step.finished_at is None, "the killed append's result was recorded")
        log = Path(run.workspace) / "log.txt"
        case.expect(log.exists(), "the append had not happened when its worker was killed")
        run = case.finish(run, case.worker())
        case.expect(run.status == RunStatus.DONE, f"run {run.pk} ended {run.status}: {run.error}")
        lines = log.read_text() if log.exists() else ""
        case.expect(lines == "appended\n", f"the resumed append left {lines!r}, not one line")
        outputs = tool_outputs(run, "shell")
        case.expect(bool(outputs) and outputs[-1].startswith("1\n"), f"the shell said {outputs}")
    return case.report


# --- (b) A fork from step N --------------------------------------------------------------------

FORK_SCRIPT = [
    shell("echo one > notes.txt"),
    calls(("git_commit", {"message": "one"})),
    shell("echo two >> notes.txt; echo draft > draft.txt"),
    shell("echo three >> notes.txt; rm draft.txt"),
    FINISH,
]


def fork_case(*, say: Callable[[str], None] = print) -> Report:
    """1. A source run plays its turns to the end; the fork point N is its second shell step.
    2. A fork from N: its worker SIGKILLs itself right after making the fork's worktree (before
       its first step of its own): that worktree is the checkpoint after N, files and HEAD.
    3. The next worker dies after the fork's next shell ran and before its result.
    4. The last one ends the fork: its files are the source's, replayed once past N, in its own
       worktree; the source's worktree (files and HEAD) is as it was before the fork."""
    with lab("fork", say) as case:
        source = case.finish(case.start(FORK_SCRIPT), case.worker())
        case.expect(source.status == RunStatus.DONE, f"the source ended {source.status}")
        shells = seqs(source, "shell")
        at, next_shell = shells[1], shells[2]
        after_n = (
            Step.objects.filter(run=source, name=checkpoints.NAME, seq__gt=at)
            .order_by("seq")
            .values_list("result", flat=True)
            .first()
        )
        if not isinstance(after_n, dict):
            raise CaseFailed(f"the source recorded no checkpoint after step {at}")
        theirs = Path(source.workspace)
        before = checkpoints.take(theirs, run_id=source.pk, label="chaos-before-fork")

        fork = runs.fork_run(source.pk, at_seq=at, by="chaos-owner")
        case.run_ids.append(fork.pk)
        targets = [
            (fork, "before_intent_commit", at + 1),
            (fork, "after_effect_before_result", next_shell),
        ]
        case.killed(case.worker(targets), "before the fork's first step")
        fork.refresh_from_db()
        mine = Path(fork.workspace)
        case.expect(mine.name == f"run-{fork.pk}", f"the fork works in {mine}, not its own")
        made = checkpoints.take(mine, run_id=fork.pk, label="chaos-at-fork")
        case.expect(
            (made["tree"], made["head"]) == (after_n["tree"], after_n["head"]),
            f"the fork's new worktree is not step {at}'s checkpoint: {made} != {after_n}",
        )
        case.killed(case.worker(targets), "after the fork's shell and before its result")
        fork = case.finish(fork, case.worker(targets))

        case.expect(fork.status == RunStatus.DONE, f"the fork ended {fork.status}: {fork.error}")
        case.expect(mine.stat().st_uid != theirs.stat().st_uid, "the fork runs as the source's uid")
        notes = (mine / "notes.txt").read_text() if (mine / "notes.txt").exists() else ""
        case.expect(notes == "one\ntwo\nthree\n", f"the fork's notes are {notes!r}")
        case.expect(not (mine / "draft.txt").exists(), "the fork's shell ran on another worktree")
        after = checkpoints.take(theirs, run_id=source.pk, label="chaos-after-fork")
        case.expect(
            (after["tree"], after["head"]) == (before["tree"], before["head"]),
            "the fork changed the source's worktree",
        )
    return case.report


# --- (c) The engine version bumped mid-run ----------------------------------------------------

# A worker of another deployment: `python -c DEPLOYMENT '{"engine": ..., "compatible": ...}'
# <kernel_worker options>` (the engine version is code, not configuration: only a process of its
# own can run another one).
DEPLOYMENT = (
    "import sys, django; django.setup(); from missions import chaos;"
    " chaos.deployment_worker(sys.argv[1:])"
)


def deployment_worker(argv: list[str]) -> None:
    """The kernel loop of the deployment `argv[0]` declares (JSON: its engine version, and the
    earlier versions each program resumes); `argv[1:]` are kernel_worker's options."""
    declared = json.loads(argv[0])
    programs.ENGINE_VERSION = str(declared["engine"])
    for name, versions in declared["compatible"].items():
        # What that deployment's `programs.register(..., compatible=...)` would say.
        programs._COMPATIBLE[name] = frozenset(versions)
    call_command("kernel_worker", *argv[1:])


def engine_bump_case(*, say: Callable[[str], None] = print) -> Report:
    """1. A crash-free twin (on this engine) finds the first append's seq.
    2. A worker of this engine SIGKILLs itself mid-append: the run is in flight, its journal
       written by this engine.
    3. The next version is deployed, its agent program declaring no earlier version: the run
       is parked as "needs migration" (waiting, no lease, one event) within its first claims.
    4. That deployment is replaced by one whose agent program declares this version compatible:
       it resumes the parked run to its end, the append applied once, the run now the new
       version's."""
    with lab("engine bump", say) as case:
        current = programs.ENGINE_VERSION
        bumped = str(int(current) + 1)  # versions are whole numbers, ordered (kernel.versions)
        script = [shell(APPEND), shell(APPEND), FINISH]
        twin = case.finish(case.start(script), case.worker())
        first = seqs(twin, "shell")[0]
        run = case.start(script)
        case.killed(case.worker([(run, "after_effect_before_result", first)]), "mid-append")

        strict = case.worker(engine=bumped)
        case.until(
            f"run {run.pk} resumed or parked by engine {bumped}",
            lambda: (
                Run.objects.filter(pk=run.pk, needs_migration=True).exists()
                or Run.objects.filter(pk=run.pk, engine_version=bumped).exists()
            ),
            strict,
            timeout=PARK_SECONDS,
        )
        run.refresh_from_db()
        case.expect(
            (run.needs_migration, run.status, run.lease_owner, run.engine_version)
            == (True, RunStatus.WAITING, "", current),
            f"run {run.pk} was not parked: needs_migration={run.needs_migration}"
            f" status={run.status} lease_owner={run.lease_owner!r} engine={run.engine_version}",
        )
        parked = Event.objects.filter(run_id=run.pk, kind="run.needs_migration").count()
        case.expect(parked == 1, f"run {run.pk} was announced parked {parked} times")
        case.stop(strict)

        run = case.finish(run, case.worker(engine=bumped, compatible={"agent": [current]}))
        case.expect(run.status == RunStatus.DONE, f"run {run.pk} ended {run.status}: {run.error}")
        case.expect(
            (run.needs_migration, run.engine_version) == (False, bumped),
            f"run {run.pk} resumed as engine {run.engine_version!r}, parked={run.needs_migration}",
        )
        case.expect(
            Event.objects.filter(run_id=run.pk, kind="run.engine_upgraded").exists(),
            f"run {run.pk}'s upgrade was not announced",
        )
        log = Path(run.workspace) / "log.txt"
        lines = log.read_text() if log.exists() else ""
        case.expect(lines == "appended\n" * 2, f"two appends across the bump left {lines!r}")
    return case.report


# --- (d) The supervisor scenario killed at every step boundary ---------------------------------

MISSION_SECONDS = 180.0  # the whole scenario, from a worker's start to the mission's end


def supervisor_case(*, say: Callable[[str], None] = print, quick: bool = False) -> Report:
    """The supervisor scenario (`missions.scenarios`: a ledger plan, three readers, two writers
    merged, the tests and an evaluator as the definition of done), its workers SIGKILLed at
    every step boundary of the supervisor and at a few inside its children (`quick`: a handful,
    over the spawns, the joins, the merges and the verdicts).

    1. A crash-free twin ends `done`: its journal gives the seqs to aim at, its facts the end
       every killed mission must reach.
    2. The same scenario, each worker dying at the next target, until the mission ends.
    3. It ended as the twin did: same children (none spawned twice), same envelopes and
       criteria, exactly two merge commits (none doubled), the writers' files; a child that had
       ended before a kill was never run again; every token charged to the root once."""
    with lab("supervisor" + (" quick" if quick else ""), say) as case:
        twin = _scenario_root(case)
        case.finish(twin, case.worker())
        expected = scenarios.observe(twin)
        case.run_ids.extend(_family(twin))
        if expected.status != RunStatus.DONE or len(expected.merges) != 2:
            raise CaseFailed(f"the crash-free twin did not end done with two merges: {expected}")
        root = _scenario_root(case)
        offset = root.pk - twin.pk
        targets = [
            (Run(pk=run_id + offset), point, seq)
            for run_id, point, seq in _supervisor_targets(twin, expected, quick=quick)
        ]
        ended: dict[int, tuple[Any, ...]] = {}  # children that had ended: what they were then
        while not Run.objects.filter(pk=root.pk, finished_at__isnull=False).exists():
            if len(case.workers) > len(targets) + 2:
                raise CaseFailed(f"{len(case.workers)} workers and the mission has not ended")
            process = case.worker(targets)
            _died_or_ended(case, process, root)
            if process.poll() is None:
                case.stop(process)  # the mission ended: no target was left on its way
                break
            if process.returncode != -signal.SIGKILL:
                raise CaseFailed(f"a worker exited {process.returncode}{case.log(process)}")
            case.report.kills += 1
            for child, state in _ended_children(root).items():
                ended.setdefault(child, state)
        fired = {path.name for path in (case.data / "fired").iterdir()}
        case.report.targets_fired = sum(
            1 for run, point, seq in targets if f"{run.pk}-{point}-{seq}" in fired
        )
        missed = [f"{r.pk}:{p}@{s}" for r, p, s in targets if f"{r.pk}-{p}-{s}" not in fired]
        case.expect(not missed, f"targets never reached: {', '.join(missed)}")
        case.run_ids.extend(_family(root))
        got = scenarios.observe(root)
        _same_end(case, got, expected)
        replayed = {
            child: (then, now)
            for child, then in ended.items()
            if (now := _ended_children(root).get(child)) != then
        }
        case.expect(not replayed, f"children that had ended were run again: {replayed}")
    return case.report


def _scenario_root(case: Lab) -> Run:
    repo = scenarios.create_repository(case.base / f"shop-{len(case.run_ids)}")
    project = projects.create_project(
        name=f"chaos {case.name} {uuid.uuid4().hex[:8]}", repository=str(repo)
    )
    _, run = scenarios.launch_mission(project, trigger="chaos")
    case.run_ids.append(run.pk)
    return run


def _family(root: Run) -> list[int]:
    return list(Run.objects.filter(root=root).exclude(pk=root.pk).values_list("pk", flat=True))


def _supervisor_targets(
    twin: Run, facts: scenarios.Facts, *, quick: bool
) -> list[tuple[int, str, int]]:
    """(run, crash point, seq) in the twin's family, in the order the mission meets them: at
    each step of the supervisor a point its kind surely passes (a join: before its intent; a
    step that executed: between its effect and its result; a write: after its result too), and
    a model step or a commit inside a reader, a writer and the evaluator."""
    steps = list(
        Step.objects.filter(run=twin).order_by("seq").values_list("seq", "kind", "name", "effect")
    )
    aimed: list[tuple[int, str, int]] = []

    def at(seq: int, kind: str, effect: str) -> None:
        if kind == StepKind.JOIN:
            aimed.append((twin.pk, "before_intent_commit", seq))
            return
        aimed.append((twin.pk, "after_effect_before_result", seq))
        if effect in (Effect.IDEMPOTENT_WRITE, Effect.NON_IDEMPOTENT):
            aimed.append((twin.pk, "after_result_commit", seq))

    if quick:
        spawns = [s for s in steps if s[1] == StepKind.SPAWN]
        joins = [s for s in steps if s[1] == StepKind.JOIN]
        merges = [s for s in steps if s[2] == "merge_work"]
        verdicts = [s for s in steps if s[1] == StepKind.VERDICT]
        # The second reader's spawn, the readers' join, the first writer's spawn, the second
        # merge, the tests' oracle, the evaluator's spawn and the evaluator's join.
        for seq, kind, _name, effect in (
            spawns[1],
            joins[0],
            spawns[3],
            merges[1],
            verdicts[0],
            spawns[5],
            joins[2],
        ):
            at(seq, kind, effect)
        aimed = [a for a in aimed if a[1] != "after_result_commit" or a[2] == merges[1][0]]
    else:
        for seq, kind, _name, effect in steps:
            at(seq, kind, effect)
    children = {name: run_id for name, (run_id, _, _) in facts.children.items()}
    inside = [
        (children["read-text"], StepKind.MODEL_CALL, None),
        (children["fix-prices"], StepKind.TOOL_CALL, "git_commit"),
        *(((facts.evaluators[0], StepKind.MODEL_CALL, None),) if facts.evaluators else ()),
    ]
    for run_id, kind, name in inside[: 2 if quick else None]:
        found = Step.objects.filter(run_id=run_id, kind=kind)
        if name:
            found = found.filter(name=name)
        first = found.order_by("seq").values_list("seq", flat=True).first()
        if first is not None:
            aimed.append((run_id, "after_effect_before_result", first))
    return aimed


def _died_or_ended(case: Lab, process: subprocess.Popen[bytes], root: Run) -> None:
    """Wait for `process` to die (at its crash point) or for the mission to end."""
    deadline = time.monotonic() + MISSION_SECONDS
    while process.poll() is None:
        if Run.objects.filter(pk=root.pk, finished_at__isnull=False).exists():
            return
        if time.monotonic() >= deadline:
            raise CaseFailed(
                f"neither a kill nor the mission's end within {MISSION_SECONDS:.0f} s"
                f"{case.log(process)}"
            )
        time.sleep(0.05)


def _ended_children(root: Run) -> dict[int, tuple[Any, ...]]:
    """The children of the mission that have ended, each with its end, its fence (one more
    each time a worker claims it) and its journal's executions: what must not change once it
    has ended."""
    ended = Run.objects.filter(root=root, finished_at__isnull=False).exclude(pk=root.pk)
    return {
        run.pk: (
            run.status,
            run.finished_at,
            run.fence,
            tuple(Step.objects.filter(run=run).order_by("seq").values_list("seq", "executions")),
        )
        for run in ended
    }


def _same_end(case: Lab, got: scenarios.Facts, expected: scenarios.Facts) -> None:
    """The killed mission ended as its crash-free twin did (run ids shifted)."""
    first = scenarios.CHILDREN[0]
    shift = got.children[first][0] - expected.children[first][0] if first in got.children else 0
    case.expect(got.status == expected.status, f"the mission ended {got.status}")
    case.expect(got.answer == expected.answer, f"its answer differs: {got.answer!r}")
    case.expect(got.criteria == expected.criteria, f"its criteria: {got.criteria}")
    case.expect(
        got.children == {n: (pk + shift, s, e) for n, (pk, s, e) in expected.children.items()},
        f"its children differ: {got.children} (the twin's: {expected.children})",
    )
    case.expect(
        got.spawned == expected.spawned,
        f"{got.spawned} runs spawned, the twin {expected.spawned}",
    )
    writers = sorted(f"{scenarios.TRAILER}{got.children[n][0]}" for n in scenarios.WRITERS)
    case.expect(sorted(got.merges) == writers, f"its merge commits: {got.merges}")
    case.expect(got.files == expected.files, f"its files differ: {got.files}")
    own, everyone = got.tokens
    case.expect(own == everyone, f"the root was charged {own} tokens, its tree spent {everyone}")


# --- (e) Node runners killed mid-step ------------------------------------------------------------

# Each shell step sleeps this long after its write: time to be killed, and for the killer to see
# its last victim's node back before the next step is done.
NODE_STEP_SECONDS = 2.5


def node_runner_case(*, say: Callable[[str], None] = print, quick: bool = False) -> Report:
    """A coding run whose shell steps run on three SSH nodes (network namespaces, each with its
    own sshd and runner; the control plane's own node disabled). While a step sleeps after its
    write, the runner process serving it on its node is SIGKILLed (sshd lives on): the step is
    placed again on another node under a higher fence, after the worktree is put back to the
    step's checkpoint. Its node, marked lost, is asked again and rejoins.
    Checked: the run ends done, every append is in the log exactly once, each killed step has one
    lost attempt and one done, and every step is answered by a node."""
    from cluster import nodes, testhosts
    from cluster.models import Node, Placement

    wanted = 2 if quick else 12
    # Names of their own: the nodes stay registered (disabled) with the placements they took.
    names = [f"chaos-{uuid.uuid4().hex[:6]}-{number}" for number in (1, 2, 3)]
    with lab("node runner", say) as case:
        hosts = testhosts.start(
            names=names,
            base=case.data / "nodes",
            public_key_line=nodes.public_key_line(),
        )
        local = nodes.local_node()
        try:
            for host in hosts.nodes:
                nodes.add_node(
                    name=host.name, address=host.node_ip, port=host.port, host_key=host.host_key
                )
            nodes.set_enabled(node=local, enabled=False)
            count = wanted + 4  # a step may still end unseen while the killer waits on a node
            appends = [
                ("shell", {"command": f"echo {index} >> log.txt; sleep {NODE_STEP_SECONDS}"})
                for index in range(count)
            ]
            # Two steps a turn: 8 turns in a row without a ledger change would be a stall the
            # owner is asked about.
            script = [calls(*appends[index : index + 2]) for index in range(0, count, 2)]
            run = case.start([*script, FINISH])
            killer = _RunnerKiller(hosts, wanted)
            killer.start()
            try:
                # Each step's sleep, and for each kill a node lost, asked again and a second
                # attempt: the run's own deadline grows with them.
                seconds = RUN_SECONDS + count * NODE_STEP_SECONDS + wanted * 10
                run = case.finish(run, case.worker(), seconds=seconds)
            finally:
                killer.stop()
            case.report.kills += len(killer.killed)
            case.expect(killer.error is None, f"the killer failed: {killer.error}")
            case.expect(
                run.status == RunStatus.DONE, f"run {run.pk} ended {run.status}: {run.error}"
            )
            log = Path(run.workspace) / "log.txt" if run.workspace else None
            lines = log.read_text() if log is not None and log.exists() else ""
            expected = "".join(f"{index}\n" for index in range(count))
            case.expect(lines == expected, f"the log holds {lines!r}, not each append once")
            case.expect(
                len(killer.killed) == wanted,
                f"{len(killer.killed)} runners killed mid-step, not {wanted}",
            )
            attempts: dict[str, list[str]] = {}
            for attempt in Placement.objects.filter(step_id__startswith=f"run-{run.pk}-"):
                attempts.setdefault(attempt.step_id, []).append(attempt.status)
            for step_id, statuses in attempts.items():
                done = statuses.count(Placement.Status.DONE)
                case.expect(done == 1, f"step {step_id} was answered {done} times: {statuses}")
                lost = statuses.count(Placement.Status.LOST)
                case.expect(
                    lost == (1 if step_id in killer.killed else 0),
                    f"step {step_id}: {lost} lost attempts, killed: {step_id in killer.killed}",
                )
            case.expect(len(attempts) == count, f"{len(attempts)} shell steps placed of {count}")
        finally:
            hosts.stop()
            nodes.close_all()
            Node.objects.filter(name__in=names).update(enabled=False)
            nodes.set_enabled(node=local, enabled=True)
    return case.report


class _RunnerKiller:
    """Watches the test nodes' live sandboxes; kills the runner serving each of the first
    `wanted` steps seen (once per step), then brings its node back."""

    def __init__(self, hosts: Any, wanted: int) -> None:
        self.hosts = hosts
        self.wanted = wanted
        self.killed: list[str] = []
        self.error: str | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="runner-killer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=60)

    def _loop(self) -> None:
        try:
            while not self.stopping.wait(0.05) and len(self.killed) < self.wanted:
                # Checked before each kill, not once a sweep: a turn's two steps may run at once
                # on two nodes, and one sweep would kill both when one was left to kill.
                for host in self.hosts.nodes:
                    for active in sorted((host.state / "active").glob("*.json")):
                        step = _active_step(active)
                        if len(self.killed) >= self.wanted:
                            return
                        if step and step not in self.killed and step.startswith("run-"):
                            self._kill(host, step)
        except Exception as error:  # reported as a violation by the case
            self.error = repr(error)
        finally:
            connection.close()

    def _kill(self, host: Any, step: str) -> None:
        from cluster import nodes
        from cluster.models import Node

        pids = _runner_pids(host.name)
        if not pids:
            return  # between two steps: try again
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.killed.append(step)
        # The worker's dispatch marks the node lost when the channel closes; then it is asked
        # again (its sshd lives) and rejoins: later steps may land on it.
        deadline = time.monotonic() + 30
        node = Node.objects.get(name=host.name)
        while node.status != Node.Status.LOST:
            if self.stopping.is_set() or time.monotonic() > deadline:
                return
            time.sleep(0.05)
            node.refresh_from_db()
        nodes.hello(node)


def _active_step(path: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError):
        found = json.loads(path.read_text())
        return str(found.get("step_id")) if isinstance(found, dict) else None
    return None


def _runner_pids(node: str) -> list[int]:
    """The runner processes serving node `node` (`python3 -m cluster.runner ... --node NAME`)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"cluster.runner" in argv and node.encode() in argv and b"--node" in argv:
            pids.append(int(entry.name))
    return pids
