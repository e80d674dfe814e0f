"""The profiles' evaluation suites (research, programming, analysis, automation) and their
oracles: each suite loads with at least ten tasks and runs offline end to end through `manage.py
mission_eval` (the scripted model's real tool calls, the sandbox, the egress service and a real
site on 127.0.0.1 for the Web tasks); the figures oracle judges numbers within a tolerance, the
citations oracle fetches each cited source again; a mission that does nothing, an answer out of
tolerance and a fabricated quote are each judged not completed."""

from __future__ import annotations

import io
import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from cluster.identity import give
from kernel.models import TERMINAL, Event, Run
from missions.evals import oracle, plays, runner, site
from missions.evals.suite import SUITES, Task, load
from missions.models import Mission
from tests.cluster.egress_fixtures import egress_dir  # noqa: F401  # a fixture
from tools import workspace

# The egress sockets in a short directory every user can reach (as the Web tests have them),
# whatever the checkout's path; the evaluation starts the egress service itself.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("egress_dir")]

PROFILES = {
    "research": {"citations"},
    "programming": {"coding"},
    "analysis": {"figures"},
    "automation": {"coding"},
}


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider key: the offline model plays the tasks' scripts."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def mission_eval(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("mission_eval", *args, "--any-database", stdout=out)
    return out.getvalue().splitlines()


def rows(lines: list[str]) -> dict[str, list[str]]:
    start = next(i for i, line in enumerate(lines) if line.startswith("task "))
    found = {}
    for line in lines[start + 1 :]:
        cells = line.split()
        if len(cells) != 7:
            break
        found[cells[0]] = cells[1:]
    return found


# --- The suites ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_each_profile_suite_loads_with_ten_tasks_or_more(name: str) -> None:
    suite = load(name)

    assert len(suite.tasks) >= 10
    assert {task.kind for task in suite.tasks} == PROFILES[name]
    for task in suite.tasks:
        for mode in ("single", "multi"):
            assert task.script(mode)["turns"], (task.name, mode)
        if task.kind == "coding":
            assert task.protected(), task.name


def test_the_research_suite_reads_documents_and_the_web() -> None:
    tasks = load("research").tasks
    web = [task for task in tasks if task.site]
    assert len(web) >= 3
    assert len(tasks) - len(web) >= 3
    for task in web:
        script = task.script("single")
        fetched = [
            call for turn in script["turns"] for call in turn.get("tool_calls", [])
            if call["name"] == "web_fetch"
        ]  # fmt: skip
        assert fetched, task.name
        assert script["children"]["reader"]["turns"]


def copy_task(tmp_path: Path, suite: str, task: str) -> Path:
    shutil.copytree(SUITES / suite / task, tmp_path / "bad" / task)
    return tmp_path / "bad" / task / "task.json"


@pytest.mark.parametrize(
    ("suite", "task", "change", "message"),
    [
        (
            "analysis",
            "loan-payment",
            lambda data: data["oracle"]["figures"][0].pop("abs"),
            "is not valid under any of the given schemas (at oracle/figures/0)",
        ),
        (
            "analysis",
            "loan-payment",
            lambda data: data["oracle"]["figures"][0].update(rel=0.1),
            "is valid under each of",
        ),
        (
            "research",
            "log-retention",
            lambda data: data["plan"]["citations"][0].update(path="policies/nosuch.md"),
            "names file(s) its repo/ does not have: policies/nosuch.md.",
        ),
        (
            "research",
            "release-date",
            lambda data: data["plan"]["fetch"][0].update(url="https://elsewhere.example/"),
            "does not match",
        ),
    ],
)
def test_a_malformed_task_of_the_new_kinds_is_refused(
    tmp_path: Path, suite: str, task: str, change: Callable[[Any], object], message: str
) -> None:
    where = copy_task(tmp_path, suite, task)
    data = json.loads(where.read_text())
    change(data)
    where.write_text(json.dumps(data))

    with pytest.raises(CommandError) as refused:
        mission_eval(str(tmp_path / "bad"))
    assert str(refused.value).startswith(f"{where}: ")
    assert message in str(refused.value)


def test_a_task_naming_pages_without_a_site_is_refused(tmp_path: Path) -> None:
    where = copy_task(tmp_path, "research", "release-date")
    shutil.rmtree(where.parent / "site")

    with pytest.raises(CommandError) as refused:
        mission_eval(str(tmp_path / "bad"))
    assert str(refused.value) == f"{where}: names {{site}} pages, and the task has no site/."


# --- The figures oracle -------------------------------------------------------------------------

FIGURES = [
    {"name": "total_eur", "value": 18135.3, "abs": 0.05, "label": "total"},
    {"name": "growth_pct", "value": 33.95, "rel": 0.01, "label": "growth"},
]


@pytest.mark.parametrize(
    ("answer", "passed", "detail"),
    [
        ('Done.\n{"total_eur": 18135.32, "growth_pct": 34.1}\n[exit code 0]', True, ""),
        ('```json\n{"figures": {"total_eur": "18,135.30", "growth_pct": "33.95%"}}\n```', True, ""),
        ("The total is EUR 18 135.30 and the growth 33.9 %.", True, ""),
        ("Total (EUR): 18,135.28; growth: 34.28%.", True, ""),
        (
            '{"total_eur": 18135.4, "growth_pct": 33.95}',
            False,
            "total_eur: 18135.4, expected 18135.3 (within 0.05)",
        ),
        ('{"total_eur": 18135.3, "growth_pct": 34.4}', False, "growth_pct: 34.4, expected 33.95"),
        ("The total is 18135.3.", False, "growth_pct: not in the answer"),
        ("", False, "the mission gave no answer"),
        ("I could not compute it.", False, "total_eur: not in the answer"),
    ],
)
def test_the_figures_oracle(answer: str, passed: bool, detail: str) -> None:
    verdict = oracle.check_figures(answer, FIGURES)
    assert verdict.passed is passed, verdict.detail
    assert detail in verdict.detail


def test_a_json_figure_wins_over_a_labelled_one() -> None:
    answer = 'The total was 9 last year. {"total_eur": 18135.3, "growth_pct": 33.95}'
    assert oracle.check_figures(answer, FIGURES).passed


@pytest.mark.parametrize("answer", ['{"a": [' * 50_000, "{" * 300_000, '{"total_eur": "' * 9_000])
def test_an_answer_of_unclosed_json_is_judged_quickly(answer: str) -> None:
    started = time.monotonic()
    assert not oracle.check_figures(answer, FIGURES).passed
    assert oracle.citations_of(answer) == []
    assert time.monotonic() - started < 10


# --- The citations oracle -----------------------------------------------------------------------

PAGE = (
    "<html><body><h1>Releases</h1><p>Tessellate 5.0 was released\n   on 2024-04-18.</p>"
    "<p>Tessellate 4.9 was released on 2024-01-30.</p></body></html>"
)


@pytest.fixture
def pages() -> Iterator[site.Site]:
    with site.serving({"releases.html": PAGE.encode()}) as served:
        assert served is not None
        yield served


def cite(answer: str, *citations: dict[str, str]) -> str:
    return f"{answer}\n\n{json.dumps({'citations': list(citations)})}"


def judge_citations(answer: str, pages: site.Site) -> oracle.Verdict:
    documents = {"notes/release.md": "The team shipped Tessellate 5.0 on 2024-04-18, a Thursday."}

    def fetch(where: str) -> str | None:
        return pages.text(where) if plays.is_url(where) else documents.get(where)

    return oracle.check_citations(
        answer,
        expected=["2024-04-18"],
        sources=[f"{pages.url}/releases.html", "notes/release.md"],
        fetch=fetch,
    )


def test_a_quote_found_again_on_the_page_passes(pages: site.Site) -> None:
    quote = {
        "quote": "Tessellate 5.0 was released on 2024-04-18.",
        "url": f"{pages.url}/releases.html",
    }
    verdict = judge_citations(cite("It came out on 2024-04-18.", quote), pages)
    assert verdict.passed, verdict.detail
    assert "1 passage(s) found again" in verdict.detail


@pytest.mark.parametrize("path", ["notes/release.md", "./notes/release.md", "/notes/release.md"])
def test_a_quote_found_again_in_a_document_passes(pages: site.Site, path: str) -> None:
    quote = {"quote": "The team  shipped\nTessellate 5.0 on 2024-04-18", "path": path}
    verdict = judge_citations(cite("On 2024-04-18.", quote), pages)
    assert verdict.passed, verdict.detail


def test_web_fetch_s_own_answer_is_a_citation(pages: site.Site) -> None:
    fetched = {
        "url": f"{pages.url}/releases.html",
        "answer": {
            "facts": [
                {
                    "fact": "5.0: 2024-04-18",
                    "quote": "TESSELLATE 5.0 was released on 2024-04-18",
                    "url": f"{pages.url}/releases.html",
                }
            ]
        },
    }
    answer = f"Released on 2024-04-18.\n{json.dumps(fetched, indent=1)}"
    assert judge_citations(answer, pages).passed


RELEASES = "{site}/releases.html"
TRUE_QUOTE = "Tessellate 5.0 was released on 2024-04-18."


def on(where: str, quote: str) -> dict[str, str]:
    return {"quote": quote, ("url" if plays.is_url(where) else "path"): where}


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ("", "the mission gave no answer"),
        ("It came out on 2024-04-18.", "0 passage(s) cited; at least 1 expected"),
        # A fabricated quote: the page says no such thing.
        (
            cite(
                "On 2024-04-18.",
                on(RELEASES, "Tessellate 5.0 was released on 2024-04-18 to acclaim"),
            ),
            f"not found in {RELEASES}: 'Tessellate 5.0 was released on 2024-04-18 to",
        ),
        # One true quote does not save a fabricated one.
        (
            cite(
                "On 2024-04-18.",
                on("notes/release.md", "The team shipped Tessellate 5.0 on 2024-04-18"),
                on("notes/release.md", "The team shipped Tessellate 5.1 too"),
            ),
            "not found in notes/release.md",
        ),
        (
            cite("On 2024-04-18.", on("https://evil.example/releases.html", TRUE_QUOTE)),
            "https://evil.example/releases.html is not a source of this task",
        ),
        (
            cite("On 2024-04-18.", on("{site}/other.html", TRUE_QUOTE)),
            "{site}/other.html is not a source of this task",
        ),
        (
            cite("On 2024-04-18.", on(RELEASES, "2024-04-18")),
            f"a quote of {RELEASES} is under 12 characters",
        ),
        # The answer only in the quote: the prose must state it.
        (cite("See the quote.", on(RELEASES, TRUE_QUOTE)), "expected '2024-04-18'"),
        (
            cite("On 2024-01-30.", on(RELEASES, "Tessellate 4.9 was released on 2024-01-30.")),
            "expected '2024-04-18'",
        ),
    ],
)
def test_the_citations_oracle_refuses(answer: str, detail: str, pages: site.Site) -> None:
    verdict = judge_citations(answer.replace("{site}", pages.url), pages)
    assert not verdict.passed
    assert detail.replace("{site}", pages.url) in verdict.detail


def test_a_cited_source_outside_the_supporting_ones_fails(pages: site.Site) -> None:
    quote = {
        "quote": "Tessellate 4.9 was released on 2024-01-30.",
        "url": f"{pages.url}/releases.html",
    }
    verdict = oracle.check_citations(
        cite("5.0 came out on 2024-04-18.", quote),
        expected=["2024-04-18"],
        sources=["notes/release.md"],
        fetch=pages.text,
    )
    assert not verdict.passed
    assert verdict.detail == "no passage cited from notes/release.md states '2024-04-18'"


def test_a_true_quote_that_does_not_state_the_answer_backs_nothing(pages: site.Site) -> None:
    quote = on(f"{pages.url}/releases.html", "Tessellate 4.9 was released on 2024-01-30.")
    verdict = judge_citations(cite("5.0 came out on 2024-04-18.", quote), pages)
    assert not verdict.passed
    assert verdict.detail.endswith("states '2024-04-18'")


def test_the_site_serves_its_pages_only(pages: site.Site) -> None:
    assert "Tessellate 4.9" in (pages.text(f"{pages.url}/releases.html") or "")
    assert pages.text(f"{pages.url}/missing.html") is None
    assert pages.text(f"http://localhost:{pages.port}/releases.html") is None


# --- Nothing done is never completed ------------------------------------------------------------


@pytest.fixture
def fixtures_base() -> Iterator[Path]:
    """Where the sandbox user can reach the tasks' repositories."""
    base = workspace.root() / "test-evals" / uuid.uuid4().hex[:8]
    yield base
    shutil.rmtree(base, ignore_errors=True)


CODING = [
    (suite, task.name)
    for suite in ("programming", "automation")
    for task in load(suite).tasks
]  # fmt: skip


def fixed(task: Task, path: Path) -> Path:
    """The task's repository with its plan's work committed (our own fixture's files)."""
    repository = runner.materialise(task, path)
    for write in task.plan.get("writes", []):
        (repository / write["path"]).write_text(write["content"])
    for change in task.plan["edits"]:
        target = repository / change["path"]
        target.write_text(target.read_text().replace(change["old_text"], change["new_text"]))
    workspace.host_git(repository, "add", "--all")
    workspace.host_git(repository, "commit", "--quiet", "-m", task.plan["message"])
    return repository


@pytest.mark.parametrize(("suite", "name"), CODING)
def test_each_coding_task_fails_as_shipped_and_passes_done(
    suite: str, name: str, fixtures_base: Path
) -> None:
    task = load(suite).select([name])[0]
    shipped = runner.materialise(task, fixtures_base / "shipped")
    done = fixed(task, fixtures_base / "done")
    for repository in (shipped, done):
        give(repository)

    before = oracle.run_tests(shipped, None, task.test_command, task.protected())
    after = oracle.run_tests(done, None, task.test_command, task.protected())

    assert not before.passed, before.detail
    assert after.passed, after.detail


@pytest.mark.parametrize("suite", ["analysis", "research"])
def test_no_answer_and_a_wrong_one_fail_every_answering_task(suite: str) -> None:
    for task in load(suite).tasks:
        with site.serving(task.site) as served:
            for answer in ("", "I looked at the documents.", "42 1,204 2024-04-18 {}"):
                verdict = runner.judge_answer(task, answer, served)
                assert not verdict.passed, (task.name, answer, verdict.detail)


# --- Offline, end to end ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("seeded_profiles")
@pytest.mark.parametrize("name", sorted(PROFILES))
def test_each_profile_suite_completes_offline(name: str) -> None:
    """Each profile's suite, under that profile (its tools, level and caps), offline."""
    lines = mission_eval(name, "--mode", "single")

    table = rows(lines)
    assert len(table) == len(load(name).tasks)
    for task, (kind, status, verdict, *_rest) in table.items():
        assert kind in PROFILES[name]
        assert (status, verdict) == ("done", "pass"), f"{task}\n" + "\n".join(lines)
    summary = dict(part.split("=", 1) for part in lines[-1].split()[1:])
    assert summary["suite"] == name
    assert summary["rate"] == "1.000"
    assert not Run.objects.exclude(status__in=TERMINAL).exists()
    assert set(Mission.objects.values_list("profile__name", flat=True)) == {name}
    if name == "research":  # the pages were read through the egress, by quarantined readers
        fetches = sum(len(task.plan.get("fetch", [])) for task in load(name).tasks)
        assert Run.objects.filter(input__role="reader", status="done").count() == fetches
        assert Event.objects.filter(kind="egress.allowed").count() >= fetches


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("name", "tasks"),
    [("research", "sso-plan,license-audit"), ("analysis", "vat-return")],
)
def test_the_supervisor_mode_completes_the_new_kinds(name: str, tasks: str) -> None:
    lines = mission_eval(name, "--mode", "multi", "--tasks", tasks)

    table = rows(lines)
    assert [cells[1:3] for cells in table.values()] == [["done", "pass"]] * len(table), lines
    # Each supervisor with documents to read delegated the reading (pages have their reader).
    reading = [task for task in load(name).select(tasks.split(",")) if task.plan["read"]]
    workers = Run.objects.filter(parent__isnull=False).exclude(input__role="reader")
    assert workers.count() >= len(reading) >= 1


def broken_suite(tmp_path: Path) -> Path:
    """Tasks of the profile suites whose scripts end `done` without doing the task: a quote
    made up, a page's quote the page does not have (web_fetch drops it: nothing is cited), the
    wrong quarter added up, a job script never written."""
    suite = tmp_path / "broken"

    def change(source: str, name: str, how: Callable[[dict[str, Any]], object]) -> None:
        shutil.copytree(SUITES / source / name, suite / name)
        where = suite / name / "task.json"
        data = json.loads(where.read_text())
        how(data)
        where.write_text(json.dumps(data))

    change(
        "research",
        "log-retention",
        lambda data: data["plan"]["citations"][0].update(
            quote="Web server access logs are kept for 90 days, as the law requires."
        ),
    )
    change(
        "research",
        "release-date",
        lambda data: data["plan"]["citations"][0].update(
            quote="Tessellate 5.0 was released on 2024-04-18 after two betas."
        ),
    )
    change(
        "analysis",
        "quarterly-revenue",
        lambda data: data["plan"].update(command=data["plan"]["command"].replace('"09"', '"10"')),
    )
    change("automation", "csv-to-json", lambda data: data["plan"].update(writes=[]))
    return suite


@pytest.mark.django_db(transaction=True)
def test_the_new_oracles_judge_missions_that_did_not_do_the_task(tmp_path: Path) -> None:
    lines = mission_eval(str(broken_suite(tmp_path)))

    table = rows(lines)
    assert {task: cells[1:3] for task, cells in table.items()} == {
        "csv-to-json": ["done", "FAIL"],
        "log-retention": ["done", "FAIL"],
        "quarterly-revenue": ["done", "FAIL"],
        "release-date": ["done", "FAIL"],
    }, "\n".join(lines)
    text = "\n".join(lines)
    assert "not found in policies/logging.md: 'Web server access logs are kept for 90" in text
    assert "0 passage(s) cited; at least 1 expected" in text  # the reader's quote was dropped
    assert "q3_revenue: " in text
    assert ", expected 112058" in text
    assert "FAILED (errors=1)" in text  # the test of the job that was never written
