"""The Tool type: what a tool is, for the harness that decides whether and how to run it.

The full registry, built-in tools, permissions and sandboxing come with the tools issue; the
agent engine already speaks to tools through this type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import jsonschema

from kernel.context import StepCall
from kernel.models import Effect


class Risk(StrEnum):
    READ = "read"
    WORKSPACE_WRITE = "workspace_write"
    NETWORK = "network"
    EXTERNAL = "external"  # external or irreversible: needs an owner approval


class ToolInputError(ValueError):
    """The model's arguments do not match the tool's schema: answered to the model, not run."""


@dataclass(frozen=True)
class Tool:
    """A typed tool.

    `run(call, arguments) -> str` does the work (its text goes back to the model); `probe`, for
    non-idempotent tools, answers "did this call already take effect?" after a crash with the
    earlier output, or None.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    effect: Effect
    risk: Risk
    run: Callable[[StepCall, dict[str, Any]], str]
    min_sandbox_level: int = 0
    parallel_safe: bool = False
    probe: Callable[[StepCall, dict[str, Any]], str | None] | None = None
    deferred: bool = False  # only name and description in context; schema loaded on demand
    _validator: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        # Check the schema and build its validator once, not on every call.
        cls = jsonschema.validators.validator_for(self.input_schema)
        cls.check_schema(self.input_schema)
        object.__setattr__(self, "_validator", cls(self.input_schema))

    def validate(self, arguments: Any) -> dict[str, Any]:
        """The arguments if they match the input schema; else a precise `ToolInputError`."""
        if not isinstance(arguments, dict):
            raise ToolInputError(f"{self.name}: arguments must be a JSON object.")
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path) or "(root)"
            raise ToolInputError(f"{self.name}: {where}: {error.message}")
        return arguments
