"""Offline missions: what the owner can run on a project's repository without any model key.

Each is a script the offline model (`missions.providers.scripted`) plays with the real loop and
tools: it looks at the repository with the file tools, runs one command in the sandbox, and
ends with a report that quotes what the tools returned (`{output:T.N}`), never more. The
command does the looking — finding how the project is tested, counting files — and prints its
own findings, so the report says what the sandbox saw, including that nothing was found or that
the command could not run.

A mission started this way has the offline model as its executor route and its key in the root
run's contract (`offline`): the console says who ran it, and a relaunch starts it offline again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from missions import demo_script
from missions.errors import MissionError

ROUTES = {"executor": {"provider": "scripted", "model": "scripted"}}
TEST_SECONDS = 540  # the test command's own limit, under the shell call's
SHELL_SECONDS = 600

# Run the tests: find the command, run it, print a verdict read from its exit status, the lines
# that mention failures and the end of its output (each line cut at 300 characters). It exits
# with the test command's status, so the sandbox's own "[exit code N]" says the same.
RUN_TESTS = rf"""out=/tmp/test-output.txt
cmd=
why=
if [ -f Makefile ] && grep -Eq '^test[[:space:]]*:' Makefile; then
  cmd='make test'; why='the Makefile has a test target'
elif [ -f package.json ] && grep -Eq '"test"[[:space:]]*:' package.json; then
  cmd='npm test'; why='package.json has a test script'
elif [ -f pytest.ini ] || [ -f conftest.py ] || grep -qs '^\[tool\.pytest' pyproject.toml \
  || grep -qs '^\[tool:pytest\]' setup.cfg || grep -qs '^\[pytest\]' tox.ini; then
  cmd='python3 -m pytest -q'; why='pytest is configured'
elif [ -f go.mod ]; then
  cmd='go test ./...'; why='go.mod'
elif [ -f Cargo.toml ]; then
  cmd='cargo test'; why='Cargo.toml'
elif [ -n "$(find . -path ./.git -prune -o \( -name 'test_*.py' -o -name '*_test.py' \) -print \
  | head -n 1)" ]; then
  cmd='python3 -m unittest discover -v'; why='Python test files'
fi
if [ -z "$cmd" ]; then
  echo 'Result: no test command found, so no tests were run.'
  echo 'Looked for: a test target in a Makefile, a test script in package.json, a pytest'
  echo 'configuration, go.mod, Cargo.toml, Python test files (test_*.py, *_test.py).'
  exit 3
fi
echo "Test command: $cmd (found: $why)"
timeout -k 10 {TEST_SECONDS} sh -c "$cmd" >"$out" 2>&1 </dev/null
status=$?
if [ "$status" -eq 0 ]; then
  echo 'Result: the test command passed (exit status 0).'
elif [ "$status" -eq 124 ]; then
  echo 'Result: the test command did not finish within {TEST_SECONDS} s and was stopped.'
elif [ "$status" -eq 126 ] || [ "$status" -eq 127 ]; then
  echo "Result: the test command could not run (exit status $status)."
else
  echo "Result: the test command failed (exit status $status)."
fi
echo "Output: $(wc -l <"$out") line(s)."
pattern='FAIL|ERROR|Error|Traceback|failed|not ok|panicked|No such file|not found'
matched=$(grep -Ec "$pattern" "$out")
if [ "$matched" -gt 0 ]; then
  echo
  echo "Lines that mention a failure or an error ($matched, the first 40):"
  grep -E "$pattern" "$out" | head -n 40 | cut -c1-300
fi
echo
echo 'Last lines of the output (up to 30):'
tail -n 30 "$out" | cut -c1-300
exit "$status"
"""

# Survey: what git tracks, by kind and size, the languages, the README's first lines, the recent
# history and the TODO-like markers, as counted in the sandbox.
SURVEY = r"""listing=/tmp/files.txt
git ls-files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null >"$listing"
echo "Tracked files: $(wc -l <"$listing"), $(awk '{s+=$1} END {print s+0}' "$listing") bytes."
echo
echo 'Files by extension (files, bytes; the 15 most common):'
awk '{n=$0; sub(/^[0-9]+ /, "", n); sub(/.*\//, "", n); e="(none)";
  if (match(n, /\.[^.]+$/) && RSTART > 1) e=substr(n, RSTART+1); c[e]++; b[e]+=$1}
  END {for (e in c) printf "%7d %10d  %s\n", c[e], b[e], e}' "$listing" | sort -rn | head -n 15
echo
echo 'Languages (bytes):'
langs='py Python js JavaScript mjs JavaScript ts TypeScript tsx TypeScript jsx JavaScript'
langs="$langs go Go rs Rust java Java kt Kotlin c C h C cc C++ cpp C++ hpp C++ cs C#"
langs="$langs rb Ruby php PHP swift Swift sh Shell bash Shell html HTML css CSS scss CSS"
langs="$langs sql SQL lua Lua scala Scala ex Elixir exs Elixir erl Erlang hs Haskell"
langs="$langs ml OCaml vue Vue svelte Svelte dart Dart r R pl Perl zig Zig"
awk -v langs="$langs" 'BEGIN {k=split(langs, m, " "); for (i = 1; i < k; i += 2) lang[m[i]]=m[i+1]}
  {n=$0; sub(/^[0-9]+ /, "", n); sub(/.*\//, "", n);
  if (match(n, /\.[^.]+$/) && RSTART > 1) {e=substr(n, RSTART+1); if (e in lang) b[lang[e]]+=$1}}
  END {for (l in b) printf "%10d  %s\n", b[l], l}' "$listing" | sort -rn
echo
echo 'Largest files (bytes):'
sort -rn "$listing" | head -n 5
echo
readme=
for f in README.md README.rst README.txt README readme.md Readme.md; do
  if [ -f "$f" ]; then readme=$f; break; fi
done
if [ -n "$readme" ]; then
  echo "$readme, its first 12 lines:"
  head -n 12 "$readme" | cut -c1-200
else
  echo 'No README at the top of the repository.'
fi
echo
echo "Commits: $(git rev-list --count HEAD). The 10 most recent:"
git log -n 10 --date=short --format='%h %ad %an: %s' | cut -c1-160
echo
git grep -I -c -w -E 'TODO|FIXME|XXX|HACK' >/tmp/todo.txt
echo "TODO, FIXME, XXX and HACK markers: $(awk -F: '{s+=$NF} END {print s+0}' /tmp/todo.txt) \
in $(wc -l </tmp/todo.txt) file(s). The most:"
awk -F: '{c=$NF; printf "%7d  %s\n", c, substr($0, 1, length($0) - length(c) - 1)}' \
  /tmp/todo.txt | sort -rn | head -n 5
"""

QUOTED = (
    "Everything below is quoted from what the tools returned in the sandbox; no language model"
    " read or judged it."
)


@dataclass(frozen=True)
class OfflineMission:
    key: str
    label: str | Promise
    goal: str  # recorded on the mission, in the owner's language of the product: English
    definition_of_done: str
    script: dict[str, Any]
    project: str = ""  # the only project it plays on (its script edits known files); "": any


# The demo's mission (`missions.demo`): offered again on the demo project only.
DEMO = "demo"


MISSIONS: dict[str, OfflineMission] = {
    mission.key: mission
    for mission in (
        OfflineMission(
            key="run-tests",
            label=_("Run the tests and report what fails"),
            goal="Run the tests and report what fails.",
            definition_of_done=(
                "The report gives the test command, its exit status and the failing lines as the"
                " sandbox returned them, or says that no test command was found."
            ),
            script={
                "turns": [
                    {
                        "text": "Looking at the top of the repository for how it is tested.",
                        "tool_calls": [{"name": "list_files", "arguments": {"depth": 1}}],
                    },
                    {
                        "text": "Finding the test command and running it in the sandbox.",
                        "tool_calls": [
                            {
                                "name": "shell",
                                "arguments": {
                                    "command": RUN_TESTS,
                                    "timeout_seconds": SHELL_SECONDS,
                                },
                            }
                        ],
                    },
                    {
                        "text": f"Test report. {QUOTED}\n\n{{output:2.1}}",
                        "on_error": {
                            "text": "Test report: the tests were not run. The sandbox did not"
                            " run the test command: {error}"
                        },
                    },
                ]
            },
        ),
        OfflineMission(
            key="survey",
            label=_("Survey this repository"),
            goal="Survey this repository.",
            definition_of_done=(
                "The report gives the files by kind and size, the languages, the README's first"
                " lines, the recent history and the TODO counts, as the sandbox returned them."
            ),
            script={
                "turns": [
                    {
                        "text": "Listing the top of the repository.",
                        "tool_calls": [{"name": "list_files", "arguments": {"depth": 1}}],
                    },
                    {
                        "text": "Counting files, sizes, languages, history and TODOs.",
                        "tool_calls": [{"name": "shell", "arguments": {"command": SURVEY}}],
                        "on_error": {"text": "Survey: the repository could not be listed: {error}"},
                    },
                    {
                        "text": f"Survey of the repository. {QUOTED}\n\nTop level:\n"
                        "{output:1.1}\n\n{output:2.1}",
                        "on_error": {
                            "text": "Survey: the survey command did not run in the sandbox: {error}"
                        },
                    },
                ]
            },
        ),
        OfflineMission(
            key=DEMO,
            label=_("The demo: fix the bug, commit and push the fix (the demo project only)"),
            goal=demo_script.GOAL,
            definition_of_done=demo_script.DONE,
            script=demo_script.SCRIPT,
            project=demo_script.PROJECT,
        ),
    )
}


def choices(projects: Collection[str] = ()) -> list[tuple[str, str | Promise]]:
    """The offline missions any project may run, and those bound to one of `projects`."""
    return [
        (mission.key, mission.label)
        for mission in MISSIONS.values()
        if not mission.project or mission.project in projects
    ]


def general() -> list[OfflineMission]:
    """The offline missions any project may run (those a refusal offers)."""
    return [mission for mission in MISSIONS.values() if not mission.project]


def get(key: str) -> OfflineMission:
    mission = MISSIONS.get(key)
    if mission is None:
        raise MissionError(
            f"Unknown offline mission {key!r}; offline missions: {', '.join(MISSIONS)}.",
            code="invalid_input",
        )
    return mission
