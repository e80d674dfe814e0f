"""The judges of a finished mission: the only thing that decides whether a task is completed.

Coding: the task's test command runs in the sandbox of the mission's root run (its uid, no
network), on a copy of the commit the run ended with — what the mission delivered, not what it
left lying in its worktree — with the task's protected files (its tests) put back as shipped.
The host never runs what the agent wrote, nor git on its worktree: the copy is made by git
inside the sandbox, in the sandbox's private /tmp.

Research: the mission's final answer must contain the expected answer (or an accepted spelling)
as a whole token, compared without case, with spaces collapsed and digit grouping ignored.
"""

from __future__ import annotations

import io
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from cluster.sandbox import Limits, SandboxUnavailable, for_level

ORACLE_SECONDS = 300
DETAIL_LINES = 12

# $1 is the task's test command. The committed tree is exported by git in the sandbox (the
# worktree's .git is read-only there); the protected files arrive on stdin as a tar.
SCRIPT = """\
set -eu
mkdir /tmp/oracle
git -c core.hooksPath=/dev/null -c core.fsmonitor=false archive --format=tar \
  --output=/tmp/head.tar HEAD || { echo 'oracle: the run has no commit to test'; exit 90; }
tar -x -f /tmp/head.tar -C /tmp/oracle
tar -x -f - -C /tmp/oracle
cd /tmp/oracle
exec /bin/sh -c "$1"
"""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    detail: str  # why, in a few lines: the end of the test output, or the answer's mismatch


def run_tests(
    worktree: Path, run_id: int | None, command: str, protected: dict[str, bytes]
) -> Verdict:
    """The task's test command on the last commit of `worktree`, in the sandbox of `run_id` (the
    sandbox user's without one)."""
    if not worktree.is_dir():
        return Verdict(False, "the mission's run has no worktree to test")
    try:
        done = for_level(1).run(
            ["/bin/sh", "-c", SCRIPT, "oracle", command],
            workdir=worktree,
            run_id=run_id,
            stdin=_tar(protected),
            limits=Limits(wall_seconds=ORACLE_SECONDS),
        )
    except SandboxUnavailable as error:
        return Verdict(False, f"no sandbox to run the oracle in: {error}")
    lines = done.summary().rstrip().splitlines()
    return Verdict(done.exit_code == 0, "\n".join(lines[-DETAIL_LINES:]))


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, content in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size = len(content)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def check_answer(answer: str | None, expected: list[str]) -> Verdict:
    """Whether `answer` states one of the `expected` answers."""
    if not answer or not answer.strip():
        return Verdict(False, "the mission gave no answer")
    text = normalise(answer)
    for candidate in expected:
        wanted = normalise(candidate)
        # A whole token: not inside a longer word or number ("42" is not in "142" nor "42.5").
        if re.search(rf"(?<!\w)(?<!\d[.,]){re.escape(wanted)}(?!\w)(?![.,]\d)", text):
            return Verdict(True, f"the answer states {candidate!r}")
    shown = " ".join(answer.split())
    return Verdict(False, f"expected {expected[0]!r}; the answer: {shown[:300]}")


def normalise(text: str) -> str:
    text = " ".join(text.casefold().split())
    # 12,345 / 12 345 / 12_345 -> 12345 (thousands separators only: three digits follow)
    return re.sub(r"(?<=\d)[,_\s](?=\d{3}(?!\d))", "", text)
