"""The tool harness of the agent engine: where a run's tools act (its worktree, a fork's own),
how the harness judges each call (deny / ask / allow, decided here, never by the model), and how
a model answer's calls run as journaled steps — reads of a turn in parallel, writes one at a
time, each workspace write after a checkpoint it is put back to if replayed, external actions
after the owner's approval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.utils import timezone

from agentos.core import reachability
from approvals import service as approvals
from cluster import environments
from kernel import exposure
from kernel.context import Done, ReadStep, RunContext, StepCall
from kernel.exceptions import StepFailed
from kernel.models import Effect, Run, Step, StepKind, Trust
from missions import environments as project_environments
from missions import ledger
from missions.engine import framing, relief
from missions.models import Mission
from missions.providers.base import ToolResult
from tools import checkpoints, levels, permissions, shell, workspace
from tools.base import (
    Output,
    Risk,
    Tool,
    ToolError,
    ToolInputError,
    Worksite,
    arguments_hash,
    text_of,
)
from tools.git import SHA
from tools.models import Decision

UNDONE_CHARS = 500  # of why an action outside did not happen, in the run's output
TRUST_ORDER = list(Trust)  # most trusted first


def worksite(ctx: RunContext, repository: str, base: str, level: int = 1) -> Worksite:
    """Where the run's tools act: its project, and its worktree (made once, by a journaled step;
    a fork's own, made from its checkpoint)."""
    project_id, environment = project_of(ctx)
    if not repository:
        return Worksite(ctx.run_id, project_id, None, level, environment)

    start = _base_checkpoint(ctx)

    def prepare(call: StepCall) -> Done:
        try:
            if start is not None:
                path = _writer_worktree(ctx, repository, start)
            else:
                path = workspace.ensure_worktree(ctx.run_id, repository, base)
                relief.record_baseline(ctx.run_id, path)  # before any tool step can change it
        except ToolError as error:
            raise StepFailed(f"No workspace for this run: {error}") from error
        Run.objects.filter(pk=ctx.run_id).update(workspace=str(path))
        return Done(str(path))

    request: dict[str, Any] = {"repository": repository, "base": base}
    if start is not None:
        request["checkpoint"] = start  # only then: other runs' journals keep their shape
    path = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.IDEMPOTENT_WRITE,
        name="workspace",
        request=request,
        execute=prepare,
    )
    forked = ctx.run.contract.get("forked_from") if isinstance(ctx.run.contract, dict) else None
    if forked and Path(path).name != f"run-{ctx.run_id}":
        # The copied workspace step names the source's worktree: a fork works in its own, made
        # (once, not as a step: the steps up to the fork point are the source's) from the
        # checkpoint of the fork point.
        path = str(_fork_workspace(ctx, repository, forked))
        Run.objects.filter(pk=ctx.run_id).update(workspace=path)
    ctx.run.workspace = path
    return Worksite(ctx.run_id, project_id, Path(path), level, environment)


def project_of(ctx: RunContext) -> tuple[int, environments.Environment | None]:
    """The run's project and its frozen environment (None: the project has no setup), as the
    owner pinned it: the run's own repository input and worktree play no part in it."""
    project_id, setup, commit, repository = Mission.objects.values_list(
        "project_id",
        "project__environment_setup",
        "project__environment_commit",
        "project__repository",
    ).get(pk=ctx.run.account_id)
    return project_id, project_environments.of(project_id, setup, commit, repository)


def _base_checkpoint(ctx: RunContext) -> dict[str, str] | None:
    """The parent's checkpoint a writer sub-agent starts from (`contract.base_checkpoint`, set
    by the delegating tool, never by a model), else None."""
    contracts = [ctx.input.get("contract") if isinstance(ctx.input, dict) else None]
    contracts.append(ctx.run.contract)
    for contract in contracts:
        found = contract.get("base_checkpoint") if isinstance(contract, dict) else None
        if found is None:
            continue
        if not isinstance(found, dict) or not all(
            isinstance(found.get(key), str) and SHA.match(found[key]) for key in ("head", "tree")
        ):
            raise StepFailed("The run's base checkpoint is not a checkpoint (head, tree).")
        return {key: found[key] for key in ("commit", "tree", "head") if key in found}
    return None


def _writer_worktree(ctx: RunContext, repository: str, start: dict[str, str]) -> Path:
    """A writer sub-agent's own repository: its parent's, as the parent's checkpoint `start`
    holds it (committed and uncommitted files), on branch `agentos/run-<id>` at the checkpoint's
    HEAD. Made like a fork's (a data copy, settled in the child's sandbox, marked complete once
    made): a replay after a kill anywhere finds it or makes it again."""
    if ctx.run.parent_id is None:
        raise ToolError("a writer is a sub-agent, and this run has no parent.")
    parent = Run.objects.filter(pk=ctx.run.parent_id).values("id", "workspace").first()
    if parent is None or not parent["workspace"]:
        raise ToolError("a writer starts from its parent's workspace, and there is none.")
    source = Path(parent["workspace"])
    if not source.is_dir():
        raise ToolError(f"the parent run {parent['id']}'s workspace was removed.")
    workspace.adopt_base(repository, parent["id"], ctx.run_id)
    path = checkpoints.fork_worktree(
        ctx.run_id,
        source_run=parent["id"],
        source_worktree=source,
        checkpoint={"commit": start.get("commit", start["head"]), **start},
    )
    # The parent's baseline, not the copy's files: what its agent wrote stays the agent's.
    relief.inherit_baseline(parent["id"], ctx.run_id)
    return path


def _fork_workspace(ctx: RunContext, repository: str, forked: dict[str, Any]) -> Path:
    """The fork's own worktree: the source's files as they were after the fork's step.

    Every workspace write is preceded by a checkpoint step, so the first checkpoint the source
    recorded after the fork's step holds exactly the state after it. Without one, the source
    wrote nothing since: its worktree now is that state — if no step of it is executing."""
    source_id, at_seq = int(forked["run"]), int(forked["seq"])
    source = Run.objects.filter(pk=source_id).values("workspace", "lease_expires_at").first()
    if source is None or not source["workspace"]:
        raise StepFailed(f"The source run {source_id} has no workspace to fork from.")
    later = (
        Step.objects.filter(run_id=source_id, name=checkpoints.NAME, seq__gt=at_seq)
        .exclude(finished_at=None)
        .order_by("seq")
        .values_list("result", flat=True)
        .first()
    )
    try:
        if later:
            checkpoint = later
        elif source["lease_expires_at"] is not None and source["lease_expires_at"] > timezone.now():
            raise StepFailed(
                f"Run {source_id} was executing when this fork started and has written nothing"
                " since the fork's step: fork it again once it waits, pauses or ends."
            )
        else:
            checkpoint = checkpoints.take(
                Path(source["workspace"]), run_id=source_id, label=f"fork-{ctx.run_id}"
            )
        workspace.adopt_base(repository, source_id, ctx.run_id)
        path = checkpoints.fork_worktree(
            ctx.run_id,
            source_run=source_id,
            source_worktree=Path(source["workspace"]),
            checkpoint=checkpoint,
        )
    except ToolError as error:
        raise StepFailed(f"No workspace for this fork: {error}") from error
    relief.record_baseline(ctx.run_id, path)
    return path


def judge(
    tools: dict[str, Tool], worksite: Worksite, calls: list[dict[str, Any]]
) -> list[dict[str, Any] | None]:
    """deny / ask / allow for each call (None for a call the executor will refuse anyway); paths
    are judged as they resolve in the worktree now (the tools judge again when they write).

    Then the rule of two (`kernel.exposure`), whatever the rules said: a call that would set
    the third flag of the run's tree — counting what the calls before it in this answer will
    set — asks the owner, and its verdict says which flags are set and by what."""
    verdicts: list[dict[str, Any] | None] = []
    tree: exposure.Exposure | None = None
    pending: set[str] = set()
    for call in calls:
        tool = tools.get(call["name"])
        arguments = call.get("arguments")
        if tool is None or not isinstance(arguments, dict):
            verdicts.append(None)
            continue
        verdict = permissions.evaluate(
            tool, arguments, project_id=worksite.project_id, workspace=worksite.workspace
        ).as_dict()
        if exposure.UNTRUSTED in tool.exposes and verdict["decision"] != Decision.DENY:
            # Plan, then execute: a sensitive run reads nothing from outside before its plan.
            refusal = ledger.sensitive_refusal(worksite.run_id, tool.name)
            if refusal:
                verdict = {"decision": Decision.DENY, "reason": refusal, "rule": None}
        if tool.exposes and verdict["decision"] != Decision.DENY:
            if tree is None:
                tree = exposure.of_tree(worksite.run_id)
                pending = set(tree.flags)
            if exposure.Exposure({f: {} for f in pending}).would_complete(tool.exposes):
                verdict = _rule_of_two(tree, pending, tool)
            pending |= tool.exposes
        verdicts.append(verdict)
    return verdicts


def _rule_of_two(tree: exposure.Exposure, pending: set[str], tool: Tool) -> dict[str, Any]:
    set_by = tree.describe()
    set_by += [
        f"{exposure.NAMES[flag]}: an earlier call of this turn"
        for flag in exposure.FLAGS
        if flag in pending and flag not in tree.flags
    ]
    adds = ", ".join(exposure.NAMES[flag] for flag in sorted(tool.exposes - pending))
    return {
        "decision": Decision.ASK,
        "reason": f"the rule of two: this call {adds or 'acts'} while the run's tree already"
        f" {'; '.join(set_by)}",
        "rule": None,
        "rule_of_two": set_by,
    }


def run_tools(
    ctx: RunContext,
    calls: list[dict[str, Any]],
    verdicts: list[dict[str, Any] | None],
    tools: dict[str, Tool],
    worksite: Worksite,
    justification: str,
    *,
    checkpointing: bool = False,
    framed: bool = False,
) -> list[ToolResult]:
    """Reads of a turn run in parallel, writes one at a time, in the model's order. Denied calls
    are answered with the reason; calls that need the owner wait for an approval first. With
    `framed`, each answer is rendered by the trust recorded for the step that produced it."""
    results: list[ToolResult] = []
    batch: list[tuple[dict[str, Any], ReadStep]] = []

    def answer(call: dict[str, Any], seq: int, output: str, is_error: bool = False) -> ToolResult:
        if framed:
            tool = tools.get(call["name"])
            least = tool.trust if tool is not None else None
            output = _render(ctx, seq, output, source=f"tool {call['name']}", least=least)
        return ToolResult(call["call_id"], output, is_error)

    def flush() -> None:
        outputs = ctx.parallel([step for _, step in batch])
        # A batch's steps took consecutive seqs, in order, ending at the context's last.
        first = ctx.seq - len(batch) + 1
        results.extend(
            answer(call, seq, out["output"], out["is_error"])
            for seq, ((call, _), out) in enumerate(zip(batch, outputs, strict=True), start=first)
        )
        batch.clear()

    for call, verdict in zip(calls, verdicts, strict=True):
        tool = tools.get(call["name"])
        request = {"call_id": call["call_id"], "arguments": call["arguments"]}
        decision = verdict["decision"] if verdict else Decision.ALLOW
        approval: dict[str, Any] | None = None
        if tool is not None and decision == Decision.ASK and _valid(tool, call):
            if batch:
                flush()
            # The model's words as the owner reads them: a quoted data block without our tags.
            approval = approvals.ask_approval(
                ctx,
                worksite,
                tool,
                call["arguments"],
                justification=framing.unwrap(justification),
                rule_of_two=(verdict or {}).get("rule_of_two"),
            )
            if "refused" in approval:
                verdict = {"decision": Decision.DENY, "reason": approval["refused"]}
                decision, approval = Decision.DENY, None
        execute = _executor(call, tool, tools, ctx.run, worksite, verdict, approval)
        if tool is not None and tool.interact is not None and decision != Decision.DENY:
            if batch:
                flush()
            # Its text is that of the interaction's last step: the owner's answer is theirs.
            output, is_error = _interact(ctx, tool, call, worksite, execute)
            results.append(answer(call, ctx.seq, output, is_error))
            continue
        if (
            tool is not None
            and tool.effect == Effect.READ
            and tool.parallel_safe
            and decision == Decision.ALLOW
        ):
            batch.append((call, ReadStep(StepKind.TOOL_CALL, call["name"], request, execute)))
            continue
        if batch:
            flush()
        runs_tool = tool is not None and decision != Decision.DENY
        if (
            runs_tool
            and tool is not None
            and tool.risk == Risk.WORKSPACE_WRITE
            and worksite.workspace is not None
            and checkpointing
            and _valid(tool, call)
        ):
            checkpoint = _checkpoint(ctx, worksite.workspace, call["call_id"])
            execute = _executor(
                call, tool, tools, ctx.run, worksite, verdict, approval, checkpoint=checkpoint
            )
            execute = _restoring(execute, worksite.workspace, ctx.run_id, checkpoint)
        out = ctx.step(
            StepKind.TOOL_CALL,
            effect=tool.effect if runs_tool and tool else Effect.READ,
            name=call["name"],
            request=request,
            execute=execute,
            probe=_probe(tool, call, worksite, approval)
            if runs_tool and tool and tool.probe
            else None,
        )
        results.append(answer(call, ctx.seq, out["output"], out["is_error"]))
    if batch:
        flush()
    return results


def note_undone(
    undone: dict[str, str],
    calls: list[dict[str, Any]],
    results: list[ToolResult],
    tools: dict[str, Tool],
) -> None:
    """Keep in `undone`, for each action outside (`Risk.EXTERNAL`), why its last call did not
    happen: refused by the owner or a rule, or failed where it acts (a remote refusing a push).
    A call of the same tool that went through clears it. `results` answer `calls`, in order."""
    for call, result in zip(calls, results, strict=True):
        tool = tools.get(call["name"])
        if tool is None or tool.risk != Risk.EXTERNAL:
            continue
        if result.is_error:
            said = " ".join(framing.unwrap(result.output).split())
            undone[tool.name] = said[:UNDONE_CHARS]
        else:
            undone.pop(tool.name, None)


def undone_reason(undone: dict[str, str]) -> str:
    """Why a run that ended with actions undone is not done, as its output's `reason`."""
    return "; ".join(f"{name} did not happen: {why}" for name, why in sorted(undone.items()))


def _render(
    ctx: RunContext, seq: int, output: str, *, source: str, least: Trust | None = None
) -> str:
    """`output` of step `seq` as the model reads it, by the trust the journal records for that
    step (a step not known here is rendered as the least trusted it could be: a tool's), or
    `least` (the tool's own: the Web's for content from outside) when that is lower."""
    record = ctx.records.get(seq)
    trust = framing.trust_of(record) if record is not None else Trust.TOOL
    if least is not None and TRUST_ORDER.index(least) > TRUST_ORDER.index(trust):
        trust = least
    return framing.render(output, trust=trust, source=source)


def _checkpoint(ctx: RunContext, top: Path, call_id: str) -> dict[str, str]:
    """The worktree's state before a write, as a journaled step (its replay returns the same)."""

    def take(step: StepCall) -> Done:
        try:
            label = str(step.seq)
            return Done(
                checkpoints.take(top, run_id=ctx.run_id, label=label, stopping=step.stopping)
            )
        except ToolError as error:
            raise StepFailed(str(error)) from error

    result: dict[str, str] = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.IDEMPOTENT_WRITE,
        name=checkpoints.NAME,
        request={"before": call_id},
        execute=take,
    )
    return result


def _restoring(execute: Any, top: Path, run_id: int, checkpoint: dict[str, str]) -> Any:
    """`execute`, which first puts the worktree back to `checkpoint` when its step is replayed
    (an earlier attempt may have written before it died): the write then applies once."""

    def run(step: StepCall) -> Done:
        # A command whose node kept its result ran whole: its writes stay, the replay answers it.
        if step.replay and shell.recorded(step) is None:
            try:
                checkpoints.restore(
                    top,
                    run_id=run_id,
                    checkpoint=checkpoint,
                    stopping=step.stopping,
                )
            except ToolError as error:
                return Done({"output": f"Refused: {error}", "is_error": True})
        done: Done = execute(step)
        return done

    return run


def _valid(tool: Tool, call: dict[str, Any]) -> bool:
    try:
        tool.validate(call["arguments"])
    except ToolInputError:
        return False
    return True


def _interact(
    ctx: RunContext, tool: Tool, call: dict[str, Any], worksite: Worksite, execute: Any
) -> tuple[str, bool]:
    """A tool that talks to the owner (or starts sub-agents): its own journaled steps and waits,
    after validation. Its (output, is_error).

    An interaction may refuse what its schema let through by raising `ToolError`: the refusal
    is journaled as the call's result, which the model reads as an error. It must raise it from
    what its own steps recorded, so that a replay raises it again at the same step."""
    request = {"call_id": call["call_id"], "arguments": call["arguments"]}
    if not _valid(tool, call):
        out = ctx.step(
            StepKind.TOOL_CALL,
            effect=Effect.READ,
            name=call["name"],
            request=request,
            execute=execute,
        )
        return out["output"], out["is_error"]
    interact = tool.interact
    if interact is None:  # the caller only sends tools that have one
        raise TypeError(f"{tool.name} does not talk to the owner")
    # Before its steps: what the interaction reads or sends counts from its start.
    exposure.mark(ctx.run_id, tool.exposes, seq=ctx.seq + 1, by=tool.name)
    try:
        return interact(ctx, worksite, call["arguments"]), False
    except ToolError as error:
        refused = str(error)
        out = ctx.step(
            StepKind.TOOL_CALL,
            effect=Effect.READ,
            name=call["name"],
            request=request,
            execute=lambda step: Done({"output": refused, "is_error": True}),
        )
        return out["output"], out["is_error"]


def _executor(
    call: dict[str, Any],
    tool: Tool | None,
    tools: dict[str, Tool],
    run: Run,
    worksite: Worksite,
    verdict: dict[str, Any] | None,
    approval: dict[str, Any] | None,
    *,
    checkpoint: dict[str, str] | None = None,
) -> Any:
    """The step's `execute`. With the `checkpoint` taken before a write, the tool may put the
    worktree back to it (`ToolEnv.restore`): a command whose node was lost mid-way is placed
    again on another node only after its first attempt's writes are undone."""

    def execute(step: StepCall) -> Done:
        # Refusals are journaled like any result: the model is told precisely, nothing runs.
        if tool is None:
            known = ", ".join(sorted(tools)) or "none"
            return Done(
                {"output": f"Unknown tool {call['name']!r}; tools: {known}.", "is_error": True}
            )
        if call["arguments"] is None:
            return Done(
                {"output": f"Invalid arguments for {tool.name}: {call['error']}", "is_error": True}
            )
        try:
            arguments = tool.validate(call["arguments"])
        except ToolInputError as error:
            return Done({"output": str(error), "is_error": True})
        if verdict is not None and verdict["decision"] == Decision.DENY:
            return Done(
                {
                    "output": f"Refused: {tool.name} {verdict['reason']}.",
                    "is_error": True,
                    "permission": verdict,
                }
            )
        if (
            verdict is not None
            and verdict["decision"] == Decision.ASK
            and (
                approval is None
                or approval.get("args_hash") != arguments_hash(tool.name, arguments)
            )
        ):
            # The harness's own check, whatever the loop above did: no approval, no call.
            return Done({"output": f"Refused: {tool.name} needs an approval.", "is_error": True})
        try:
            # The run's level (its mission's risk class), raised by the tool's minimum; refused
            # at level 0 unless the tool only reads, or where no node offers the level.
            level = levels.require(tool, worksite.sandbox_level)
            restore = None
            if checkpoint is not None and worksite.workspace is not None:
                top = worksite.workspace

                def restore() -> None:
                    checkpoints.restore(
                        top, run_id=run.pk, checkpoint=checkpoint, stopping=step.stopping
                    )

            env = worksite.env(step, approval, level=level, restore=restore)
            # Before the effect: a call killed half-way counts as done for the rule of two.
            exposure.mark(run.pk, tool.exposes, seq=step.seq, by=tool.name)
            answer = tool.run(env, arguments)
        except ToolError as error:
            if reachability.is_disk_full(error):
                raise  # not the tool's failure: the step waits for space (`kernel.diskfull`)
            return Done({"output": str(error), "is_error": True})
        # The exit code of a command the tool ran, in a field of its own (`tools.base.Output`).
        code = {"exit_code": answer.exit_code} if isinstance(answer, Output) else {}
        text = text_of(answer)
        # A big output goes to an artifact; the journal and the context keep a preview.
        return Done(
            {"output": relief.offload(text, tool=tool.name, run=run), "is_error": False, **code}
        )

    return execute


def _probe(
    tool: Tool, call: dict[str, Any], worksite: Worksite, approval: dict[str, Any] | None
) -> Any:
    def probe(step: StepCall) -> Done | None:
        arguments = call["arguments"] or {}
        env = worksite.env(step, approval, level=levels.effective(tool, worksite.sandbox_level))
        found = tool.probe(env, arguments) if tool.probe else None
        return Done({"output": found, "is_error": False}) if found is not None else None

    return probe
