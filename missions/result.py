"""What a mission came to, for its page: the final answer or output of its newest finished root
run (a fork is a root too), and the verdict on each criterion of its definition of done as the
stop hook recorded them (`missions.verification`: the run's output carries `criteria`, and
`missing` with the evidence of each that did not pass)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from missions.overview import Node, Tree


@dataclass(frozen=True)
class Verdict:
    description: str
    passes: bool
    evidence: str


@dataclass(frozen=True)
class Result:
    node: Node
    answer: str | None
    output: str | None  # any other output, as indented JSON
    verdicts: list[Verdict]


def of(tree: Tree) -> Result | None:
    """The result of the newest finished root run; None while no root run has finished."""
    finished = [node for node in tree.nodes if node.depth == 0 and node.run.is_terminal]
    if not finished:
        return None
    node = max(finished, key=lambda n: (n.run.finished_at or n.run.created_at, n.run.pk))
    output = node.run.output if isinstance(node.run.output, dict) else {}
    answer = output.get("answer")
    rest = {key: value for key, value in output.items() if key not in _SHOWN}
    return Result(
        node=node,
        answer=answer if isinstance(answer, str) else None,
        output=json.dumps(rest, indent=2, ensure_ascii=False, sort_keys=True)
        if rest and not isinstance(answer, str)
        else None,
        verdicts=_verdicts(output),
    )


# Said in words on the page, or bookkeeping of the loop's.
_SHOWN = frozenset({"answer", "criteria", "missing", "turns"})


def _verdicts(output: dict[str, Any]) -> list[Verdict]:
    criteria = output.get("criteria")
    missing = output.get("missing")
    evidence = {
        str(item.get("id")): str(item.get("evidence") or "")
        for item in (missing if isinstance(missing, list) else [])
        if isinstance(item, dict)
    }
    return [
        Verdict(
            description=str(criterion.get("description") or criterion.get("id") or ""),
            passes=criterion.get("passes") is True,
            evidence=evidence.get(str(criterion.get("id")), ""),
        )
        for criterion in (criteria if isinstance(criteria, list) else [])
        if isinstance(criterion, dict)
    ]
