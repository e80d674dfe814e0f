"""The resume routine (docs/design.md §12): what the harness, not the model, does before the
model works again on a long mission — at the run's start, and at every resume.

A resume is any point where the model's memory of the work may be stale:
- `resumed`: a new execution of the run (claimed again after a crash or a lost lease, after a
  durable wait — an approval, a question, a timer — or a pause) reaching the first turn boundary
  at the journal's end;
- `compaction`: the thread just folded into its summary (`window.Window.fit`).

Once the run has planned units (`missions.units`), each turn also begins with the watch on the
active unit's budget, which escalates an overrun to the owner.

The routine, each part a journaled step:
1. `resume:<why>` (a read): the project's smoke command — the owner's (`Project.smoke_command`,
   read as it is now), else `sh init.sh` when the worktree has a regular init.sh — the progress
   file (PROGRESS.md, the agent's writing: data) and the mission's ledger and units;
2. with a command: a workspace checkpoint, then the `smoke` step in the run's sandbox. It may
   write the worktree (an install, a build): an idempotent write, put back to its checkpoint
   when replayed (the node's stored result answers when the command ran whole), as the shell's;
3. one message of ours appended to the thread: a failing smoke test first, its output as data,
   then the progress file and the ledger, as data.

The project's instructions are not read here: the owner's text (`Project.instructions`) is in
the run's system prompt from its launch (`missions.launch`), and the worktree's AGENTS.md,
which the agent may have written, is never taken as instructions.

Deterministic on replay: each decision comes from the journal. A recorded `resume:<why>` step
at the next seq is replayed as it was; a new one is taken only at the journal's end, by an
execution that began with recorded steps, and not when the routine's own steps are the last in
the journal (a crash between the smoke's result and the next turn runs it once).
"""

from __future__ import annotations

import stat
from typing import TYPE_CHECKING, Any

from kernel.context import Done, RunContext, StepCall
from kernel.exceptions import StepFailed
from kernel.models import Effect, StepKind, Trust
from missions import ledger, units
from missions.engine import framing
from missions.models import Mission
from missions.providers.base import ToolResult
from tools import checkpoints, safefs, shell
from tools.base import ToolError, Worksite

if TYPE_CHECKING:
    from missions.engine.loop import Agent

STEP = "resume"
SMOKE = "smoke"
INIT = "init.sh"
PROGRESS = "PROGRESS.md"
SMOKE_SECONDS = 600
TAIL = 4000  # characters of the smoke's output, and of the progress file, the model reads
READ_BYTES = 1_000_000
WHY = {
    "start": "the run starts",
    "resumed": "the run resumes (claimed again after a crash, a wait or a pause)",
    "compaction": "the context was just compacted",
}


def at_start(run: Agent) -> None:
    """The routine as the run starts (a replay meets it at the same place)."""
    if run.spec.resume:
        _routine(run, why="start", turn=0)


def before_turn(run: Agent, number: int, *, compacted: bool) -> None:
    """Before the model step of turn `number`: the routine if this is a resume, then the watch
    on the active unit's budget (`missions.units`)."""
    if not run.spec.resume:
        return
    ctx = run.ctx
    upcoming = ctx.records.get(ctx.seq + 1)
    if compacted:
        _routine(run, why="compaction", turn=number)
    elif upcoming is not None and upcoming.name.startswith(f"{STEP}:"):
        _routine(run, why=upcoming.name.partition(":")[2], turn=number)
    elif upcoming is None and run.reclaimed:
        _routine(run, why="resumed", turn=number)
    if run.units:
        escalated = units.watch(ctx, number)
        if escalated:
            run.window.tell(escalated)


def after_tools(run: Agent, calls: list[dict[str, Any]], results: list[ToolResult]) -> None:
    """Units are watched from the turn after this run first planned some: decided from its
    recorded tool results, so a replay watches from the same turn (a mission without units
    takes no step for them)."""
    if run.spec.resume and not run.units:
        run.units = any(
            call.get("name") == units.UNIT_PLAN.name and not result.is_error
            for call, result in zip(calls, results, strict=True)
        )


def _routine(run: Agent, *, why: str, turn: int) -> None:
    ctx, worksite = run.ctx, run.worksite
    mission_id = ctx.run.account_id
    found = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.READ,
        name=f"{STEP}:{why}",
        request={"turn": turn},
        execute=lambda call: Done(_gather(worksite, mission_id, run.spec.instructions)),
    )
    smoke = _smoke(ctx, worksite, found["smoke"], why=why, turn=turn) if found["smoke"] else None
    run.window.tell(message(why, found, smoke))
    # Units planned before (by an earlier run of the mission): watched from here on.
    run.units = run.units or bool(found.get("units"))
    if ctx.seq + 1 not in ctx.records:
        # At the journal's end with the routine just taken: this execution has resumed.
        run.reclaimed = False


def _gather(worksite: Worksite, mission_id: int, frozen: str) -> dict[str, Any]:
    """The smoke command, the progress file and the ledger, as they are now; the owner's
    project instructions when they changed since the run's system prompt was frozen."""
    top = worksite.workspace
    command, instructions = (
        Mission.objects.filter(pk=mission_id)
        .values_list("project__smoke_command", "project__instructions")
        .first()
    ) or ("", "")
    command = command or ""
    progress: str | None = None
    if top is not None:
        if not command and _regular(top, INIT):
            command = f"sh {INIT}"
        progress = _text(top, PROGRESS)
    if top is None or worksite.sandbox_level < 1:
        command = ""  # no worktree, or a read-only mission: nothing runs
    plan = ledger.render(ledger.of(mission_id))
    planned_units = units.summary(mission_id)
    return {
        "smoke": command or None,
        "progress": progress,
        "ledger": f"{plan}\n{planned_units}" if planned_units else plan,
        "units": bool(planned_units),
        "instructions": instructions if instructions and instructions not in frozen else None,
    }


def _regular(top: Any, name: str) -> bool:
    try:
        with safefs.locate(top, name) as found:
            info = found.lstat()
            return info is not None and stat.S_ISREG(info.st_mode)
    except ToolError:
        return False  # a link out of the worktree, say: not ours to run


def _text(top: Any, name: str) -> str | None:
    """The file's text, capped; None when there is none; why not when it cannot be read."""
    try:
        with safefs.locate(top, name) as found:
            if found.lstat() is None:
                return None
            data = safefs.read_regular(found, name, READ_BYTES)
    except ToolError as error:
        return f"[not read: {error}]"
    text = data.decode("utf-8", errors="replace")
    return text[:TAIL] + (f"\n[... {len(text) - TAIL} more characters]" if len(text) > TAIL else "")


def _smoke(
    ctx: RunContext, worksite: Worksite, command: str, *, why: str, turn: int
) -> dict[str, Any]:
    """The smoke command in the run's sandbox and worktree, after a checkpoint it is put back
    to when replayed: its exit code (None: killed) and its output's tail."""
    top = worksite.workspace
    assert top is not None  # noqa: S101  # `_gather` names a command only with a worktree

    def take(call: StepCall) -> Done:
        try:
            return Done(
                checkpoints.take(
                    top, run_id=ctx.run_id, label=str(call.seq), stopping=call.stopping
                )
            )
        except ToolError as error:
            raise StepFailed(str(error)) from error

    checkpoint = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.IDEMPOTENT_WRITE,
        name=checkpoints.NAME,
        request={"before": f"{SMOKE}:{why}:{turn}"},
        execute=take,
    )

    def execute(call: StepCall) -> Done:
        def restore() -> None:
            checkpoints.restore(
                top, run_id=ctx.run_id, checkpoint=checkpoint, stopping=call.stopping
            )

        try:
            # A replay whose node kept no result: the dead attempt's writes are undone first.
            if call.replay and shell.recorded(call) is None:
                restore()
            ran = shell.run_command(
                worksite.env(call, restore=restore), command, timeout=SMOKE_SECONDS
            )
        except ToolError as error:
            return Done({"exit_code": None, "output": f"[the smoke test could not run: {error}]"})
        text = ran.text if len(ran.text) <= TAIL else "[...]\n" + ran.text[-TAIL:]
        return Done({"exit_code": ran.exit_code, "output": text})

    result: dict[str, Any] = ctx.step(
        StepKind.VERDICT,
        effect=Effect.IDEMPOTENT_WRITE,
        name=SMOKE,
        request={"command": command, "why": why, "turn": turn},
        execute=execute,
    )
    return result


def message(why: str, found: dict[str, Any], smoke: dict[str, Any] | None) -> str:
    """What the model reads: a failing smoke test first, then where the work stands. Only our
    words are plain; the command's output, the progress file and the ledger (agents wrote
    them) are data blocks."""
    parts = [f"[system] Resume routine: {WHY.get(why, why)}."]
    command = found.get("smoke")
    if smoke is not None and smoke.get("exit_code") != 0:
        code = smoke.get("exit_code")
        exited = f"exit code {code}" if code is not None else "killed or not run"
        parts.append(
            f"The smoke test FAILED (`{command}`, {exited})."
            " Fix this first: the project is broken, go on with the goal only once it passes."
        )
        parts.append(framing.render(str(smoke["output"]), trust=Trust.TOOL, source="smoke test"))
    elif smoke is not None:
        parts.append(f"The smoke test passed (`{command}`).")
    else:
        parts.append("No smoke test: the project sets no command and the worktree has no init.sh.")
    if found.get("instructions"):
        # The owner's words (saved by their act, `missions.project_settings`): not data.
        parts.append(
            "The owner changed the project's instructions since this run began; they now read:\n"
            + str(found["instructions"])
        )
    progress = found.get("progress")
    if progress is None:
        parts.append(f"There is no {PROGRESS} yet.")
    else:
        parts.append(f"{PROGRESS}, as the worktree holds it (written by agents):")
        parts.append(framing.render(progress, trust=Trust.AGENT, source=f"file {PROGRESS}"))
    parts.append("The mission's ledger (written by agents):")
    parts.append(framing.render(str(found["ledger"]), trust=Trust.AGENT, source="ledger"))
    return "\n\n".join(parts)
