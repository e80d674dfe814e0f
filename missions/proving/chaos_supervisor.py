"""The chaos case of the supervisor scenario (`missions.proving.scenarios`), killed at every step
boundary of its supervisor and inside its children (its lab is `missions.proving.chaos`).
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

from kernel.models import Effect, Run, RunStatus, Step, StepKind
from kernel.proving.chaos import Report
from missions import projects
from missions.proving import scenarios
from missions.proving.chaos import CaseFailed, Lab, lab

MISSION_SECONDS = 180.0  # the whole scenario, from a worker's start to the mission's end


def supervisor_case(*, say: Callable[[str], None] = print, quick: bool = False) -> Report:
    """The supervisor scenario (`missions.proving.scenarios`: a ledger plan, three readers, two
    writers merged, the tests and an evaluator as the definition of done), its workers SIGKILLed
    at every step boundary of the supervisor and at a few inside its children (`quick`: a
    handful, over the spawns, the joins, the merges and the verdicts).

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
        twin_names = _names(twin.pk)
        reached: set[tuple[int, str, int]] = set()  # targets a worker died at
        while not Run.objects.filter(pk=root.pk, finished_at__isnull=False).exists():
            if len(case.workers) > len(targets) + 2:
                raise CaseFailed(f"{len(case.workers)} workers and the mission has not ended")
            # Each target dies once: the seqs move (`_aligned`), so the targets reached are
            # told by the worker that reached them, not by their seq.
            left = [(r, p, s) for r, p, s in targets if (r.pk, p, s) not in reached]
            plan = _aligned(left, root.pk, twin_names)
            aimed = {
                f"{run.pk}-{point}-{at_seq}": (run.pk, point, seq)
                for (run, point, seq), (_, _, at_seq) in zip(left, plan, strict=True)
            }
            # A marker of the same name left by another target, reached at this seq before the
            # seqs moved, would keep this one from firing (a marker means "fired already").
            for key in aimed:
                (case.data / "fired" / key).unlink(missing_ok=True)
            before = _fired(case)
            process = case.worker(plan)
            _died_or_ended(case, process, root)
            if process.poll() is None:
                case.stop(process)  # the mission ended: no target was left on its way
                break
            if process.returncode != -signal.SIGKILL:
                raise CaseFailed(f"a worker exited {process.returncode}{case.log(process)}")
            case.report.kills += 1
            reached.update(aimed[key] for key in _fired(case) - before if key in aimed)
            for child, state in _ended_children(root).items():
                ended.setdefault(child, state)
        case.report.targets_fired = len(reached)
        missed = [f"{r.pk}:{p}@{s}" for r, p, s in targets if (r.pk, p, s) not in reached]
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


def _fired(case: Lab) -> set[str]:
    """The targets the workers died at so far, as they were planned (run-point-seq)."""
    return {path.name for path in (case.data / "fired").iterdir()}


def _names(run_id: int) -> list[str]:
    """The run's steps by name, in seq order."""
    return list(Step.objects.filter(run_id=run_id).order_by("seq").values_list("name", flat=True))


def _aligned(
    targets: list[tuple[Run, str, int]], root_id: int, twin_names: list[str]
) -> list[tuple[Run, str, int]]:
    """The targets at the seqs the killed mission's supervisor will give the twin's steps.

    A worker killed mid-run makes the next execution take the resume routine (a
    `resume:resumed` read) at its next turn, which the crash-free twin never took: each moves
    the supervisor's later steps one seq on. Walking both journals, each such step the twin
    lacks shifts the targets past it; the other runs' targets stay as they are."""
    killed = _names(root_id)
    moved: dict[int, int] = {}  # twin seq -> seq in the killed run, over the journals' common part
    extra = twin_index = 0
    for index, name in enumerate(killed):
        if twin_index < len(twin_names) and name == twin_names[twin_index]:
            twin_index += 1
            moved[twin_index] = index + 1
        elif name == "resume:resumed":
            extra += 1
        else:
            break
    return [
        (run, point, moved.get(seq, seq + extra) if run.pk == root_id else seq)
        for run, point, seq in targets
    ]


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
