"""The chaos cases on one coding run (their lab is `missions.proving.chaos`): a shell append
killed between its effect and its result, a fork from step N, the engine version bumped mid-run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernel import programs, runs
from kernel.models import Event, Run, RunStatus, Step
from kernel.proving.chaos import Report
from missions.proving.chaos import (
    APPEND,
    FINISH,
    PARK_SECONDS,
    CaseFailed,
    calls,
    lab,
    seqs,
    shell,
    tool_outputs,
)
from tools import checkpoints

# --- A shell append killed between its effect and its result ---------------------------------


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


# --- A fork from step N ------------------------------------------------------------------------

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


# --- The engine version bumped mid-run --------------------------------------------------------


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
