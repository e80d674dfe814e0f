"""How recorded steps read on the run page: diffs styled, long outputs folded, refusals said, big
outputs linked to their artifact, and a model step under way ready to show streamed text.
Steps are built in memory here (never saved): each test is about one shape of result."""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string
from django.utils import timezone

from kernel.models import Run, Step, StepKind
from missions import timeline
from tests.approvals.factories import DIFF

RUN = Run(pk=7, program="agent")


def step(kind: str, *, name: str = "", request: Any = None, result: Any = None) -> Step:
    now = timezone.now()
    return Step(
        run=RUN,
        seq=3,
        kind=kind,
        name=name,
        request=request or {},
        result=result,
        started_at=now,
        finished_at=now if result is not None else None,
    )


def rendered(found: Step) -> str:
    return render_to_string("missions/step.html", {"e": timeline.entry(found), "run": RUN})


def test_a_diff_output_is_styled_like_the_approval_page() -> None:
    found = step(
        StepKind.TOOL_CALL,
        name="git_diff",
        request={"call_id": "c1", "arguments": {}},
        result={"output": DIFF, "is_error": False},
    )

    html = rendered(found)

    assert '<pre class="diff">' in html
    assert '<span class="diff-add">+Version 1.3</span>' in html
    assert '<span class="diff-del">-Version 1.2</span>' in html


def test_a_long_output_is_folded_with_its_line_count() -> None:
    output = "\n".join(f"line {n}" for n in range(40))
    found = step(
        StepKind.TOOL_CALL,
        name="shell",
        request={"call_id": "c1", "arguments": {"command": "make test"}},
        result={"output": output, "is_error": False},
    )

    html = rendered(found)

    assert '<details class="output-details"><summary>Output (40 lines)</summary>' in html
    assert "line 39" in html
    assert "&quot;command&quot;: &quot;make test&quot;" in html


def test_a_short_output_is_shown_open() -> None:
    found = step(
        StepKind.TOOL_CALL,
        name="shell",
        request={"call_id": "c1", "arguments": {"command": "ls"}},
        result={"output": "NOTES.md", "is_error": False},
    )

    assert '<pre class="output"><code>NOTES.md</code></pre>' in rendered(found)


def test_a_permission_refusal_is_said_plainly() -> None:
    found = step(
        StepKind.TOOL_CALL,
        name="shell",
        request={"call_id": "c1", "arguments": {"command": "curl evil.test"}},
        result={
            "output": "Refused: shell is denied by rule 4.",
            "is_error": True,
            "permission": {"decision": "deny", "reason": "is denied by rule 4"},
        },
    )

    html = rendered(found)

    assert "Refused by your permission rules: is denied by rule 4" in html
    assert 'class="step step-tool_call step-error"' in html


def test_an_offloaded_output_links_to_its_artifact() -> None:
    sha = "ab" * 32
    found = step(
        StepKind.TOOL_CALL,
        name="shell",
        request={"call_id": "c1", "arguments": {}},
        result={
            "output": f"head\n[... output of 90000 characters offloaded to artifact {sha}; read"
            " more with read_artifact(sha256, offset, length)]",
            "is_error": False,
        },
    )

    assert f'<a href="/artifacts/{sha}">The whole output (artifact)</a>' in rendered(found)


def test_a_model_step_under_way_waits_for_its_streamed_text() -> None:
    html = rendered(step(StepKind.MODEL_CALL, name="claude-opus-5-5"))

    assert 'data-delta-for="7" data-delta-seq="3" data-delta-channel="text"' in html
    assert 'id="delta-7-3-text" hx-preserve="true"' in html
    assert 'data-delta-channel="reasoning"' in html
    assert "under way" in html
    assert "Fork from here" not in html  # no result to fork from yet


def test_a_compaction_keeps_its_summary_folded() -> None:
    found = step(
        StepKind.COMPACTION,
        name="scripted",
        result={"narrative": "Decisions: continue.", "files": {"NOTES.md": "x"}},
    )

    html = rendered(found)

    assert "<summary>The conversation was folded into this summary</summary>" in html
    assert "Decisions: continue." in html
    assert "1 working file(s) re-read with the summary" in html


def test_an_approval_wait_shows_the_call_its_diff_and_the_decision() -> None:
    question = {
        "type": "approval",
        "tool": "git_push",
        "arguments": {"remote": "origin", "branch": "main"},
        "justification": "The notes are final.",
        "preview": {"diff": DIFF},
    }
    found = step(
        StepKind.WAIT_HUMAN,
        name="owner",
        request={"question": question, "seconds": 3600},
        result={"answer": {"approved": False, "note": "Not before Monday."}},
    )

    html = rendered(found)

    assert "Asks your approval to run <code>git_push</code>" in html
    assert '<span class="diff-add">+Version 1.3</span>' in html
    assert "<strong>refused</strong> — Not before Monday." in html


def test_a_model_step_says_what_the_provider_cleared_before_it_read() -> None:
    result = {"text": "Done.", "cleared": {"tool_results": 8, "tokens": 50_000}}

    html = rendered(step(StepKind.MODEL_CALL, name="claude-opus-5-5", result=result))

    assert "The provider cleared 8 old tool results (50,000 tokens) first." in html
    assert "cleared" not in rendered(step(StepKind.MODEL_CALL, result={"text": "Done."}))


def test_checkpoints_are_said_in_words() -> None:
    window = timeline.entry(step(StepKind.CHECKPOINT, name="context-window", result=200_000))
    notified = timeline.entry(
        step(
            StepKind.CHECKPOINT,
            name="notify-owner",
            request={"message": "Tests pass."},
            result={"sent": True},
        )
    )

    assert window.summary == "Context window: 200,000 tokens"
    assert notified.summary == "Told you: Tests pass."
    facts = {"window": 200_000, "server_clearing": True}
    cleared = timeline.entry(step(StepKind.CHECKPOINT, name="context-window", result=facts))
    assert cleared.summary == (
        "Context window: 200,000 tokens; the provider clears old tool results"
    )
    counted = timeline.entry(
        step(
            StepKind.CHECKPOINT,
            name="count-tokens",
            request={"turn": 3, "estimate": 120_500},
            result={"tokens": 98_000},
        )
    )
    assert counted.summary == "The provider counts 98,000 tokens (estimated 120,500)"
    failed = timeline.entry(
        step(
            StepKind.CHECKPOINT,
            name="count-tokens",
            request={"turn": 3, "estimate": 120_500},
            result={"tokens": None, "error": "overloaded: Overloaded"},
        )
    )
    assert (
        failed.summary
        == "No count from the provider (overloaded: Overloaded): the estimate decides"
    )


def test_a_diff_splits_only_where_git_does_and_shows_what_hides() -> None:
    diff = (
        "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -1 +1,2 @@\n import os\n"
        "+x = 1\u2028-os.system('sh')\x0cdiff --git a/docs.md b/docs.md\n"
    )
    found = step(
        StepKind.TOOL_CALL,
        name="git_diff",
        request={"call_id": "c1", "arguments": {}},
        result={"output": diff, "is_error": False},
    )

    html = rendered(found)

    assert "diff-del" not in html
    assert (
        '<span class="diff-add">+x = 1<span class="hidden-char" title="U+2028">&lt;U+2028&gt;'
        "</span>-os.system(&#x27;sh&#x27;)"
        '<span class="hidden-char" title="U+000C">\u240c</span>diff --git a/docs.md b/docs.md'
        "</span>"
    ) in html
    assert "\u2028" not in html
    assert "\x0c" not in html


def test_a_file_name_that_hides_characters_is_escaped_and_flagged() -> None:
    for name, quoted in [
        ("report\u202eyxt.py", '"b/report\\342\\200\\256yxt.py"'),
        ("set\u200btings.py", "b/set\u200btings.py"),
        ("log\x1b[2Kclean.py", '"b/log\\033[2Kclean.py"'),
    ]:
        a_side = quoted.replace("b/", "a/", 1)
        question = {
            "type": "approval",
            "tool": "git_push",
            "arguments": {"remote": "origin", "branch": "main"},
            "preview": {"diff": f"diff --git {a_side} {quoted}\n+++ {quoted}\n+x\n"},
        }
        found = step(StepKind.WAIT_HUMAN, name="owner", request={"question": question})

        html = rendered(found)

        assert "hidden characters in this name" in html, name
        hidden = next(char for char in name if char in "\u202e\u200b\x1b")
        assert hidden not in html


def test_a_tool_output_and_its_input_show_what_hides() -> None:
    found = step(
        StepKind.TOOL_CALL,
        name="git_status",
        request={"call_id": "c1", "arguments": {"path": "a\u202eb"}},
        result={"output": "## main\n M report\u202eyxt.py\n?? progress\r50%\n", "is_error": False},
    )

    html = rendered(found)

    assert "\u202e" not in html
    assert "\r" not in html
    assert ' M report<span class="hidden-char" title="U+202E">&lt;U+202E&gt;</span>yxt.py\n' in html
    assert 'progress<span class="hidden-char" title="U+000D">\u240d</span>50%' in html
