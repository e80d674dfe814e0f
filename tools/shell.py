"""The shell tool: a command line run in the run's sandbox (its level: `tools.levels`), in the
run's worktree.

Its effects stay in the worktree (no network, nothing else writable), so a command replayed
after a crash is the agent running it twice, which it sees: classed as an idempotent write.
Whatever it changed among the protected paths is undone after it, and the model is told, in the
output journaled with the step (`tools.snapshots`, crash-safe across that replay).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from cluster import dispatch, egress, sandbox
from cluster.dispatch import StepRef
from cluster.runner.protocol import RpcError
from cluster.sandbox import Limits, SandboxUnavailable, for_level
from kernel.models import Effect, Run
from kernel.steps import StepCall
from tools import snapshots
from tools.base import Output, Risk, Tool, ToolEnv, ToolError

if TYPE_CHECKING:
    from cluster.dispatch import StepRef

DEFAULT_TIMEOUT = 300
MAX_TIMEOUT = 1800


def run_command(env: ToolEnv, command: str, *, timeout: float = DEFAULT_TIMEOUT) -> Command:
    """`command` in the run's sandbox, in its worktree, protected paths put back after
    it: what the shell tool and the definition of done's command oracles both run.

    The node keeps the command's result under the step (`step_ref`) before it answers: a replay
    whose earlier attempt got that far answers it instead of running the command again (the
    harness does not put the worktree back to its checkpoint then either: `recorded`)."""
    top = env.need_workspace()
    step = step_ref(env.call, before_retry=env.restore)
    stored = recorded(env.call)
    guard = snapshots.Guard(top, run_id=env.run_id, key=env.call.idempotency_key)
    # With a stored result this still ends what the dead attempt began: the protected paths its
    # command changed are put back from its snapshot.
    earlier = guard.begin()
    try:
        if stored is not None:
            # Run on a node's own copy of the worktree: what it changed is brought back here,
            # after the protected paths' snapshot (restored from it after, as for a fresh run).
            dispatch.settle(step, stored, workdir=top)
            result = sandbox.result(stored)
        else:
            result = for_level(max(env.sandbox_level, 1)).run(
                ["/bin/sh", "-c", command],
                workdir=top,
                limits=Limits(wall_seconds=timeout),
                stopping=env.call.stopping,
                run_id=env.run_id,
                step=step,
                # Its run's way out (the allow-list proxy and bridges), when it needs one.
                egress=egress.attach_for_run(env.run_id, seconds=timeout),
                environment=env.environment,
            )
    except SandboxUnavailable as error:
        guard.end()
        raise ToolError(f"No sandbox on this node: {error}") from None
    except RpcError as error:
        guard.end()
        raise ToolError(f"The command's changes could not be brought back: {error}") from None
    # Also after a timeout or a cancellation: the command may have written before it was killed.
    changed = guard.end()
    lines = [str(result.summary())]
    if earlier:
        lines.append(snapshots.note(earlier, earlier=True))
    if changed:
        lines.append(snapshots.note(changed))
    return Command(result.exit_code, "\n".join(lines))


def step_ref(call: StepCall, *, before_retry: Callable[[], None] | None = None) -> StepRef:
    """The step as its node knows it. Run ids start again in a new database while a node's
    fences and results stay, so the run's creation time is part of both names. `before_retry`
    undoes a lost attempt's writes before the step is placed on another node."""
    created = Run.objects.values_list("created_at", flat=True).get(pk=call.run_id)
    incarnation = int(created.timestamp() * 1_000_000)
    return StepRef(
        step_id=f"run-{call.run_id}-{incarnation}-{call.seq}",
        key=f"{call.idempotency_key}-{incarnation}",
        fence=call.fence.token,
        before_retry=before_retry,
    )


def recorded(call: StepCall) -> dict[str, Any] | None:
    """On a replayed step: the result its node already wrote for it (the command ran, the
    worker died before the journal recorded it), else None."""
    if not call.replay:
        return None
    return dispatch.recorded(step_ref(call))


class Command(NamedTuple):
    exit_code: int | None  # None when killed (timeout, cancellation)
    text: str  # its output and what happened, as the model reads it


def _shell(env: ToolEnv, arguments: dict[str, Any]) -> Output:
    done = run_command(
        env, arguments["command"], timeout=arguments.get("timeout_seconds", DEFAULT_TIMEOUT)
    )
    return Output(done.text, done.exit_code)


SHELL = Tool(
    name="shell",
    description=(
        "Run a shell command in the sandbox, in the workspace (mounted at /workspace): no"
        " network, .git read-only, output capped. Use it to run tests and builds."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "maxLength": 20000},
            "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.WORKSPACE_WRITE,
    min_sandbox_level=1,
    run=_shell,
    subject=lambda arguments: str(arguments.get("command", "")),
)
