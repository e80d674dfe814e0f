"""The rule of two (docs/design.md §19): a run tree may do at most two of three things without
the owner — read untrusted content, hold secrets or private data, change external state or
communicate out.

Each run records the flags it set in `Run.exposure`, `{flag: {"seq": step, "by": what}}`, from
inside the step that did the thing (before its effect: a step killed mid-way is counted as
done, never as not done). A flag is never cleared. The flags of a run are those of its whole
tree: a sub-agent inherits its parent's, and a parent reads what its children did through their
results. Whoever is about to make the third flag true asks the owner first (the harness for tool
calls, the egress proxy refuses, since a sandbox cannot wait)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import F, Func, JSONField, Q, Value

from kernel.models import Run

UNTRUSTED = "untrusted"  # read content from outside: the Web, an MCP server's output, A2A input
PRIVATE = "private"  # holds secrets or private data: a bridge with credentials, private memory
OUTWARD = "outward"  # changes external state or communicates out: a push, an MCP write, A2A
FLAGS = (UNTRUSTED, PRIVATE, OUTWARD)
NAMES = {
    UNTRUSTED: "read untrusted content",
    PRIVATE: "holds secrets or private data",
    OUTWARD: "changes external state or communicates out",
}


@dataclass(frozen=True)
class Exposure:
    """A tree's flags: for each one set, the first step that set it (`{"run", "seq", "by"}`)."""

    flags: dict[str, dict[str, Any]]

    def would_complete(self, adding: frozenset[str] | set[str]) -> bool:
        """Whether doing something that sets `adding` leaves all three flags set."""
        return bool(adding) and set(FLAGS) <= set(self.flags) | set(adding)

    def describe(self) -> list[str]:
        """One line per flag set, saying by which step: what an approval page shows."""
        return [
            f"{NAMES[flag]}: step {where['seq']} of run {where['run']} ({where['by']})"
            for flag in FLAGS
            if (where := self.flags.get(flag)) is not None
        ]


def mark(run_id: int, flags: frozenset[str] | set[str], *, seq: int, by: str) -> None:
    """Record that step `seq` of `run_id` sets `flags` (a flag already set keeps its first step).
    One statement: idempotent, so a replayed step marks again harmlessly."""
    unknown = set(flags) - set(FLAGS)
    if unknown:
        raise ValueError(f"Unknown rule-of-two flag(s): {', '.join(sorted(unknown))}.")
    if not flags:
        return
    added = {flag: {"seq": seq, "by": by[:200]} for flag in sorted(flags)}
    # jsonb `||`: the right side wins, so the existing value there keeps a flag's first step.
    merged = Func(
        Value(added, output_field=JSONField()),
        F("exposure"),
        arg_joiner=" || ",
        template="(%(expressions)s)",
        output_field=JSONField(),
    )
    Run.objects.filter(pk=run_id).update(exposure=merged)


def of_tree(run_id: int) -> Exposure:
    """The flags of `run_id`'s whole tree (its root, its ancestors, its siblings and children)."""
    root = Run.objects.filter(pk=run_id).values_list("root_id", flat=True).first() or run_id
    rows = Run.objects.filter(Q(root_id=root) | Q(pk=root)).order_by("pk")
    flags: dict[str, dict[str, Any]] = {}
    for pk, exposure in rows.values_list("pk", "exposure"):
        for flag, where in (exposure or {}).items():
            if flag in FLAGS and flag not in flags and isinstance(where, dict):
                flags[flag] = {"run": pk, **where}
    return Exposure(flags)
