"""Built-in tools. The file, shell, git and owner tools come with the tools issue; `noop` is here
for the engine's tests and benchmark (and as the smallest example of a tool)."""

from __future__ import annotations

from typing import Any

from kernel.context import StepCall
from kernel.models import Effect
from tools.base import Risk, Tool


def _noop(call: StepCall, arguments: dict[str, Any]) -> str:
    return f"ok {arguments.get('note', '')}".strip()


NOOP = Tool(
    name="noop",
    description="Does nothing and answers 'ok'. For tests and benchmarks.",
    input_schema={
        "type": "object",
        "properties": {"note": {"type": "string", "maxLength": 200}},
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_noop,
)

BUILTIN = [NOOP]
