from __future__ import annotations

from datetime import timedelta

from approvals import inbox, service
from tests.approvals.factories import make_approval, make_question


def test_it_counts_what_a_short_list_leaves_out(db: None) -> None:
    first = make_approval()
    make_approval(arguments={"command": "make docs"})
    make_question()
    make_approval(arguments={"command": "make late"}, due_in=timedelta(minutes=-1))
    service.decide(first.pk, approve=True, args_hash=first.request["args_hash"])

    short = inbox.waiting(limit=1)

    assert [item.kind for item in short.items] == ["question"]
    assert short.more == 1


def test_it_says_what_an_approval_is_about_in_one_line(db: None) -> None:
    shell = make_approval(arguments={"command": "make \\\n  deploy   --all"})
    unknown = make_approval(tool="mcp_tool", arguments={"b": 1, "a": "x"})
    long = make_approval(arguments={"command": "x" * 300})

    assert inbox.subject(shell.request) == "make \\ deploy --all"
    assert inbox.subject(unknown.request) == '{"a": "x", "b": 1}'
    assert len(inbox.subject(long.request)) == inbox.SUBJECT_CHARS
