"""An agent that asks the owner to act, in a browser test: the real agent loop on the offline
scripted model, run by the real stack's worker."""

from __future__ import annotations

from kernel import runs
from kernel.models import Run
from missions.models import Mission

ACTION = "Email the 1.3 release notes to the team list"


def start_agent_asking(mission: Mission) -> Run:
    """The real agent loop on the offline scripted model: it asks to act, then ends."""
    arguments = {"action": ACTION, "justification": "The notes are final; the team expects them."}
    script = {
        "turns": [
            {
                "text": "I need your approval first.",
                "tool_calls": [{"name": "request_approval", "arguments": arguments}],
            },
            {"text": "Sent."},
        ]
    }
    return runs.start_run(
        account=mission,
        program="agent",
        input={
            "goal": mission.goal,
            "provider": "scripted",
            "model": "scripted",
            "tools": ["request_approval"],
            "context_window": 100_000,
            "script": script,
        },
    )
