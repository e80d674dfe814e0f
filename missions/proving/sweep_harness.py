"""The crash sweep's operation that goes through the tool harness (`missions.engine.harness`):
one model answer's calls judged (`judge`), the one that needs the owner approved through the
approvals service, then run and recorded (`run_tools`), as the agent engine does for a turn.

The kernel's sweep (`kernel.proving.sweep`) cannot import missions: `register` adds the
operation to its workloads (`kernel.proving.scripted.EXTRA_OPS`) and the owner's answer to an
approval to its owner (`kernel.proving.harness.OWNER_ANSWERS`); `manage.py chaos` calls it
(`settings.SWEEP_EXTENSIONS`).

The tools act on the sweep's ledger (`ChaosEffect` rows, by the step's idempotency key), which
the sweep counts: `ledger.transfer` is an external, non-idempotent action (it asks the owner by
its risk class's default, docs/design.md §13) with a probe, `ledger.look` a parallel read.
"""

from __future__ import annotations

import logging
from typing import Any

from approvals import service as approvals
from approvals.errors import ApprovalError
from kernel import leases
from kernel.context import RunContext
from kernel.models import ChaosEffect, Effect, Wait
from kernel.proving import harness as owner
from kernel.proving import scripted
from missions.engine import harness
from tools.base import Risk, Tool, ToolEnv, Worksite

OP = "tools"
_AUDIT = logging.getLogger("agentos.core.audit")


def _transfer(env: ToolEnv, arguments: dict[str, Any]) -> str:
    """Applies the effect every time it runs: only the kernel (its probe) keeps it from
    repeating, and the fencing token from a zombie."""
    with leases.fenced(env.call.fence):
        ChaosEffect.objects.create(
            key=env.call.idempotency_key,
            run_id_value=env.call.run_id,
            seq=env.call.seq,
            effect=Effect.NON_IDEMPOTENT,
            value={"applied": arguments["value"]},
        )
    return f"transferred {arguments['value']}"


def _transferred(env: ToolEnv, arguments: dict[str, Any]) -> str | None:
    applied = ChaosEffect.objects.filter(key=env.call.idempotency_key).exists()
    return f"transferred {arguments['value']}" if applied else None


def _look(env: ToolEnv, arguments: dict[str, Any]) -> str:
    return f"balance {arguments['n'] * 2}"


TRANSFER = Tool(
    name="ledger.transfer",
    description="Transfer a value out of the sweep's ledger.",
    input_schema={
        "type": "object",
        "properties": {"value": {"type": "integer"}},
        "required": ["value"],
        "additionalProperties": False,
    },
    effect=Effect.NON_IDEMPOTENT,
    risk=Risk.EXTERNAL,
    run=_transfer,
    probe=_transferred,
)
LOOK = Tool(
    name="ledger.look",
    description="Read the sweep's ledger.",
    input_schema={
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_look,
    parallel_safe=True,
)
TOOLS = {tool.name: tool for tool in (TRANSFER, LOOK)}


def tool_calls(ctx: RunContext, index: int) -> Any:
    """A model answer's two calls, a read and a transfer, through the harness: the transfer
    waits for the owner's approval, then runs as a journaled non-idempotent step."""
    calls = [
        {"call_id": f"look-{index}", "name": LOOK.name, "arguments": {"n": index}},
        {"call_id": f"transfer-{index}", "name": TRANSFER.name, "arguments": {"value": index}},
    ]
    # No worktree: these tools act on the ledger only. No project: the owner's global rules
    # and the tools' risk classes decide.
    site = Worksite(ctx.run_id, None, None)
    verdicts = harness.judge(TOOLS, site, calls)
    results = harness.run_tools(ctx, calls, verdicts, TOOLS, site, f"op {index}: transfer")
    return [[result.call_id, result.output, result.is_error] for result in results]


def approve(wait: Wait) -> bool:
    """The owner approves the exact call they are shown (its hash), as from the console."""
    args_hash = wait.question.get("args_hash") if isinstance(wait.question, dict) else None
    if not isinstance(args_hash, str):
        return False
    # The security log's row is written; its console line, for each of a sweep's thousands of
    # approvals, is not news.
    level = _AUDIT.level
    _AUDIT.setLevel(logging.WARNING)
    try:
        approvals.decide(wait.pk, approve=True, args_hash=args_hash, by="chaos-owner")
    except ApprovalError:  # settled or closed meanwhile
        return False
    finally:
        _AUDIT.setLevel(level)
    return True


def register() -> None:
    """Add the harness's operation to the sweep's workloads, and the owner's approvals (again:
    the same entries)."""
    scripted.EXTRA_OPS[OP] = tool_calls
    owner.OWNER_ANSWERS["approval"] = approve
