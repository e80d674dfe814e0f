"""The approval page read on a phone: what will happen first, in one sentence; the decision
always at hand; the diff folded per file; raw hashes out of the way."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from approvals.models import Approval
from tests.approvals.factories import make_approval

pytestmark = pytest.mark.django_db

TWO_FILES = """diff --git a/calc.py b/calc.py
index 3b18e51..a9c4f2e 100644
--- a/calc.py
+++ b/calc.py
@@ -1,3 +1,3 @@
 def average(values):
-    return sum(values) / (len(values) - 1)
+    return sum(values) / len(values)
diff --git a/NOTES.md b/NOTES.md
new file mode 100644
index 0000000..a9c4f2e
--- /dev/null
+++ b/NOTES.md
@@ -0,0 +1,2 @@
+# Notes
+Fixed the average."""

COMMIT = "a9c4f2e1d0b7c6a5f4e3d2c1b0a9f8e7d6c5b4a3"
TREE = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"


def push(**preview: Any) -> Approval:
    return make_approval(
        tool="git_push",
        arguments={"remote": "origin", "branch": "main"},
        preview={
            "commit": COMMIT,
            "tree": TREE,
            "remote_was": None,
            "commits": "a9c4f2e Fix average\n1b2c3d4 Add notes",
            "files": [
                {"path": "calc.py", "status": "M", "size": 1234},
                {"path": "NOTES.md", "status": "A", "size": 32},
            ],
            "files_total": 2,
            "diff": TWO_FILES,
            "diff_chars": len(TWO_FILES),
            "diff_truncated": False,
            "full_diff": "ab" * 32,
            **preview,
        },
    )


def page(client: Client, approval: Approval) -> str:
    response = client.get(f"/approvals/{approval.pk}/")
    assert response.status_code == 200
    return str(response.content.decode())


def main_of(content: str) -> str:
    return content.split('<main class="content">', 1)[1]


def test_it_says_first_what_will_happen_in_one_sentence(owner_client: Client) -> None:
    content = main_of(page(owner_client, push()))

    sentence = re.search(r'<h1 class="page-title" id="approval-summary">([^<]*)</h1>', content)
    assert sentence is not None
    assert sentence.group(1) == "Push 2 commits to origin main of project approvals tests"
    assert content.index("approval-summary") < content.index("Why the agent asks")
    assert content.index("approval-summary") < content.index('class="card')


def test_it_says_what_a_command_or_an_action_will_do(owner_client: Client) -> None:
    command = main_of(page(owner_client, make_approval()))
    action = main_of(
        page(
            owner_client,
            make_approval(
                tool="request_approval",
                arguments={"action": "Email the notes", "justification": "Final."},
            ),
        )
    )

    assert 'id="approval-summary">Run a command in project approvals tests</h1>' in command
    assert "make deploy" in command.split("approval-summary", 1)[1].split("</p>", 1)[0]
    assert 'id="approval-summary">Do what the agent describes: Email the notes</h1>' in action


def test_it_keeps_the_decision_in_a_bar_at_the_bottom(owner_client: Client) -> None:
    approval = push()

    content = page(owner_client, approval)

    bar = content.split('id="decision-bar"', 1)[1].split("</div>", 1)[0]
    assert 'form="decision" name="decision" value="approve"' in bar
    assert 'form="decision" name="decision" value="refuse"' in bar
    assert 'form="decision" name="decision" value="always"' in bar
    assert '<form method="post" class="form" id="decision">' in content
    assert f'name="args_hash" value="{approval.request["args_hash"]}"' in content


def test_it_folds_the_diff_per_file_with_its_size_and_changed_lines(owner_client: Client) -> None:
    content = page(owner_client, push())

    files = re.findall(
        r'<details class="diff-file-block"[^>]*>\s*<summary>(.*?)</summary>', content, re.S
    )
    assert len(files) == 2
    minus = "\N{MINUS SIGN}"
    for words in ("calc.py", "+1", f"{minus}1", "1.2"):
        assert words in files[0]
    for words in ("NOTES.md", "+2", f"{minus}0", "32"):
        assert words in files[1]
    assert '<span class="diff-add">+    return sum(values) / len(values)</span>' in content
    assert f'href="/artifacts/{"ab" * 32}/"' in content or 'id="full-diff"' in content


def test_it_puts_raw_hashes_behind_a_disclosure(owner_client: Client) -> None:
    approval = push()

    content = page(owner_client, approval)

    hashes = content.split('<details id="hashes"', 1)[1].split("</details>", 1)[0]
    outside = content.replace(hashes, "")
    for raw in (COMMIT, TREE, approval.request["args_hash"]):
        assert raw in hashes
    assert COMMIT not in outside
    assert TREE not in outside
