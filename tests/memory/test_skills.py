"""Skills: a project's `.agents/skills/<name>/SKILL.md` offered to a run at launch by its name and
description only (as data in its first message), its body and files loaded on demand with
`load_skill` (as a tool's data), a path leaving the skill refused; skills imported by the owner
from a folder or a URL on a local HTTP server wait for the owner's approval on their diff, are not
offered to runs before it and are after; malformed ones are refused, saying why."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agentos.core import audit, tokens
from agentos.core.models import AuditEvent
from kernel import runs
from kernel.models import Run, Step
from kernel.worker import Worker
from memory import repository, skill_proposals, skills, store
from missions.engine import framing
from missions.launch import create_mission
from missions.models import Mission, Project
from missions.providers import scripted
from tests.api.conftest import Api
from tests.factories import Owner
from tests.missions.test_data_framing import echoed, parse_block
from tests.tools.conftest import FINISH, calls
from tools import workspace

LINT = """\
---
name: lint
description: >-
  Lint the project's Python files
  with the house rules.
license: MIT
---
# Lint

Run `sh .agents/skills/lint/scripts/lint.sh` and fix what it reports. mark-lint-body
"""
SCRIPT = "#!/bin/sh\necho lint-script-ran\n"
DEPLOY = """\
---
name: deploy
description: Deploy the shop with blue-green.
---
Switch the router only after the health check passes. mark-deploy-body
"""
OWNER = audit.Actor(by="owner")


def git(repo: Path, *args: str) -> None:
    workspace.host_git(repo, *args)


@pytest.fixture
def repo() -> Iterator[Path]:
    """A project repository the sandbox user can reach, with a lint skill (and a script), a
    malformed skill, and a skill named unlike its folder."""
    base = workspace.root() / "test-skills" / uuid.uuid4().hex[:8]
    path = base / "shop"
    (path / ".agents/skills/lint/scripts").mkdir(parents=True)
    (path / ".agents/skills/lint/SKILL.md").write_text(LINT)
    (path / ".agents/skills/lint/scripts/lint.sh").write_text(SCRIPT)
    (path / ".claude/skills/broken").mkdir(parents=True)
    (path / ".claude/skills/broken/SKILL.md").write_text("---\nname: broken\n---\nNo description.")
    (path / ".claude/skills/other").mkdir(parents=True)
    (path / ".claude/skills/other/SKILL.md").write_text("---\nname: lint\ndescription: x\n---\n")
    (path / "README.md").write_text("The shop. mark-readme\n")
    git(path, "init", "--quiet", "--initial-branch=main")
    git(path, "add", "--all")
    git(path, "commit", "--quiet", "-m", "shop with skills")
    yield path
    shutil.rmtree(base, ignore_errors=True)


def folder(tmp_path: Path, text: str, **files: str) -> Path:
    where = tmp_path / uuid.uuid4().hex[:8]
    where.mkdir()
    (where / "SKILL.md").write_text(text)
    for name, content in files.items():
        (where / name).write_text(content)
    return where


# --- The format ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "# Lint\nNo front matter.",
            "SKILL.md: no front matter: the file starts with a '---' line.",
        ),
        ("---\nname: lint\n", "SKILL.md: the front matter is not closed by a '---' line."),
        ("---\nname: [lint\n---\n", "SKILL.md: the front matter is not valid YAML (line 2)."),
        ("---\n- lint\n---\n", "SKILL.md: the front matter is not a mapping of fields."),
        ("---\ndescription: Lints.\n---\n", "SKILL.md: the front matter has no name."),
        ("---\nname: lint\n---\n", "SKILL.md: the front matter has no description."),
        (
            "---\nname: Lint It\ndescription: x\n---\n",
            "SKILL.md: 'Lint It' is not a skill name: 1 to 64 characters of a-z, 0-9 and '-', not"
            " starting or ending with '-'.",
        ),
        (
            f"---\nname: lint\ndescription: {'x' * 1025}\n---\n",
            "SKILL.md: the description is longer than 1024 characters.",
        ),
    ],
)
def test_it_refuses_a_malformed_skill_md_saying_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(skills.SkillError) as refused:
        skills.parse(text)
    assert str(refused.value) == message


def test_it_reads_name_description_and_body_and_refuses_paths_leaving_the_skill() -> None:
    skill = skills.parse(LINT)
    assert (skill.name, skill.description) == (
        "lint",
        "Lint the project's Python files with the house rules.",
    )
    assert skill.body.startswith("# Lint\n\nRun `sh .agents/skills/lint/scripts/lint.sh`")
    assert skills.check_path("scripts/./lint.sh") == "scripts/lint.sh"
    for path in ("../README.md", "scripts/../../x", "/etc/passwd", ".git/config", "a\\b", ""):
        with pytest.raises(skills.SkillError):
            skills.check_path(path)


# --- A run offered the repository's skills ------------------------------------------------------


def offered_run(project: Project, turns: list[dict[str, Any]]) -> Run:
    _, run = create_mission(
        project=project,
        goal="Tidy the shop.",
        routes={"executor": {"provider": "scripted", "model": "scripted"}},
        trigger="api",
        script={"turns": turns},
    )
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()
    return run


@pytest.mark.django_db(transaction=True)
def test_a_run_is_offered_the_repository_s_skills_and_loads_one_as_data(
    seeded_catalog: None, repo: Path
) -> None:
    project = Project.objects.create(name="shop", repository=str(repo))
    run = offered_run(
        project,
        [
            {"echo_context": True, **calls(("load_skill", {"name": "lint"}))},
            calls(
                ("load_skill", {"name": "lint", "file": "scripts/lint.sh"}),
                ("load_skill", {"name": "lint", "file": "../../../README.md"}),
                ("load_skill", {"name": "lint", "file": "missing.md"}),
                ("load_skill", {"name": "deploy"}),
                ("shell", {"command": "sh .agents/skills/lint/scripts/lint.sh"}),
            ),
            {"echo_context": True},
        ],
    )

    assert run.status == "done", run.error
    # Frozen in the run's input: the repository's good skill, at the commit the run started from.
    commit = workspace.host_git(repo, "rev-parse", "HEAD").stdout.strip()
    assert run.input["skills"] == [
        {
            "name": "lint",
            "description": "Lint the project's Python files with the house rules.",
            "source": "repository",
            "commit": commit,
            "path": ".agents/skills/lint",
        }
    ]
    assert run.input["base"] == commit
    assert "load_skill" in run.input["tools"]
    # The first request: the goal, then the skills index as data — names and descriptions, no body.
    first = seen_at(run, 0)
    opening = [item["text"] for item in first["items"] if item.get("role") == "user"]
    assert opening[0] == "Tidy the shop."
    # (then the resume routine's message: `missions.engine.resume`)
    offered = next(text for text in opening if text.startswith("Skills you may load"))
    heading, _, block = offered.partition("\n")
    assert heading == "Skills you may load with load_skill (name (source): description):"
    parsed = parse_block(block)
    assert (parsed["trust"], parsed["source"]) == ("tool", "skills index: snapshot at launch")
    assert parsed["body"] == (
        "- lint (repository): Lint the project's Python files with the house rules."
    )
    seen_first = json.dumps(first)
    assert "mark-lint-body" not in seen_first
    assert "lint-script-ran" not in seen_first

    # What load_skill returned reached the model as a tool's data block.
    last = echoed(run)
    assert "mark-lint-body" not in last["system"]
    results = tool_results(last["items"])
    body = parse_block(results[0])
    assert (body["trust"], body["source"]) == ("tool", "tool load_skill")
    assert body["body"].startswith(
        f"Skill lint (the project's repository at {commit[:12]}, .agents/skills/lint/).\n# Lint"
    )
    assert "mark-lint-body" in body["body"]
    assert f"- scripts/lint.sh ({len(SCRIPT)} bytes)" in body["body"]
    assert "license: MIT" not in body["body"]  # the body, not the front matter
    script = parse_block(results[1])["body"]
    where = f"the project's repository at {commit[:12]}, .agents/skills/lint/"
    assert script == f"File scripts/lint.sh of skill lint ({where}):\n{SCRIPT}"
    escaping = parse_block(results[2])["body"]
    assert "'../../../README.md' leaves the skill's folder: give a path inside it." in escaping
    assert "mark-readme" not in json.dumps(last)
    assert "The skill lint has no file 'missing.md'." in parse_block(results[3])["body"]
    assert (
        "No skill 'deploy' was offered to this run (offered: lint)."
        in (parse_block(results[4])["body"])
    )
    # The script ran in the sandbox, from the worktree, through the shell tool only.
    assert "lint-script-ran" in parse_block(results[5])["body"]


def seen_at(run: Run, index: int) -> dict[str, Any]:
    """What the model saw at its `index`-th call (one that echoed its context)."""
    step = Step.objects.filter(run=run, kind="model_call").order_by("seq")[index]
    assert isinstance(step.result, dict)
    seen: dict[str, Any] = json.loads(str(step.result["text"]).removeprefix(scripted.LABEL))
    return seen


def tool_results(items: list[dict[str, Any]]) -> list[str]:
    """The output of each tool result the scripted model was given, in order."""
    return [str(item["output"]) for item in items if item.get("role") == "tool"]


@pytest.mark.django_db
def test_the_api_lists_the_repository_s_skills_and_what_it_left_out(api: Api, repo: Path) -> None:
    project = Project.objects.create(name="shop", repository=str(repo))

    listed = api.get("/skills", {"project": project.pk}).json()

    assert [skill["name"] for skill in listed["repository"]] == ["lint"]
    assert listed["skills"] == listed["proposals"] == []
    assert listed["problems"] == [
        ".claude/skills/broken/SKILL.md: the front matter has no description.",
        ".claude/skills/other/SKILL.md: its name 'lint' is not its folder's ('other').",
    ]
    assert api.get("/skills", {"project": 999999}).status_code == 404


# --- Imports, approved on their diff ------------------------------------------------------------


@pytest.fixture
def api(client: Client, owner: Owner) -> Api:
    scopes = ["read", "act", "approve"]
    return Api(client, tokens.create_token(owner=owner.user, name="t", scopes=scopes).secret)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A local HTTP server on 127.0.0.1 serving tmp_path/site; its base URL."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "deploy").mkdir()
    (site / "deploy/SKILL.md").write_text(DEPLOY)
    (site / "big.md").write_text("---\nname: big\ndescription: x\n---\n" + "x" * (70 << 10))

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(site), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.mark.django_db(transaction=True)
def test_imported_skills_are_offered_only_once_the_owner_approves_them(
    seeded_catalog: None, api: Api, served: str, tmp_path: Path
) -> None:
    project = Project.objects.create(name="shop")
    url = f"{served}/deploy/SKILL.md"
    tidy = folder(tmp_path, LINT.replace("lint", "tidy"), **{"notes.txt": "mark-tidy-notes\n"})

    created = api.post("/skills/import", {"url": url})
    assert created.status_code == 201, created.content
    proposal = created.json()
    assert (proposal["name"], proposal["author"], proposal["source"]) == ("deploy", "owner", url)
    assert proposal["id"].startswith("deploy-")
    assert "+Switch the router only after the health check passes." in proposal["diff"]
    assert "b/skills/deploy/SKILL.md" in proposal["diff"]
    # The same bytes again: the same proposal.
    assert api.post("/skills/import", {"url": url}).json()["id"] == proposal["id"]
    from_path = api.post("/skills/import", {"path": str(tidy)})
    assert from_path.status_code == 201, from_path.content
    assert (from_path.json()["source"], from_path.json()["files"]) == (
        str(tidy),
        ["SKILL.md", "notes.txt"],
    )
    assert "+mark-tidy-notes" in from_path.json()["diff"]
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.MEMORY_CHANGED,
                                     detail__change="skill proposed").count() == 3  # fmt: skip

    # Pending: listed, not offered.
    listed = api.get("/skills").json()
    assert {p["id"] for p in listed["proposals"]} == {proposal["id"], from_path.json()["id"]}
    assert listed["skills"] == []
    before = offered_run(project, [{"echo_context": True}])
    assert before.input.get("skills") is None
    assert "load_skill" not in before.input["tools"]
    assert "deploy" not in json.dumps(echoed(before))
    assert "tidy" not in json.dumps(echoed(before))

    for ident in (proposal["id"], from_path.json()["id"]):
        decided = api.post(f"/skills/proposals/{ident}/decision", {"approve": True})
        assert decided.status_code == 200, decided.content
        assert decided.json()["status"] == "approved"
        again = api.post(f"/skills/proposals/{ident}/decision", {"approve": True})
        assert again.status_code == 404

    listed = api.get("/skills").json()
    assert listed["proposals"] == []
    assert [(s["name"], s["source"], s["path"]) for s in listed["skills"]] == [
        ("deploy", "memory", "skills/deploy"),
        ("tidy", "memory", "skills/tidy"),
    ]
    after = offered_run(
        project,
        [
            calls(
                ("load_skill", {"name": "deploy"}),
                ("load_skill", {"name": "tidy", "file": "notes.txt"}),
            ),
            {"echo_context": True},
        ],
    )
    assert [s["name"] for s in after.input["skills"]] == ["deploy", "tidy"]
    seen = echoed(after)
    index = parse_block(seen["items"][1]["text"].partition("\n")[2])["body"]
    assert index == (
        "- deploy (memory): Deploy the shop with blue-green.\n"
        "- tidy (memory): Lint the project's Python files with the house rules."
    )
    deploy, notes = (parse_block(text)["body"] for text in tool_results(seen["items"]))
    assert "memory's skills scope at" in deploy
    assert "mark-deploy-body" in deploy
    assert "write it with write_file" in deploy
    assert notes.endswith("approved by the owner):\nmark-tidy-notes\n")
    # Beside the scope's notes, never among them.
    assert set(repository.files("skills", repository.head("skills"))) == {
        "skills/deploy/SKILL.md",
        "skills/tidy/SKILL.md",
        "skills/tidy/notes.txt",
    }


@pytest.mark.django_db
def test_a_folder_import_refused_or_approved_and_malformed_ones_refused_precisely(
    api: Api, served: str, tmp_path: Path
) -> None:
    good = folder(tmp_path, LINT.replace("lint", "tidy"), **{"notes.txt": "a reference\n"})
    created = api.post("/skills/import", {"path": str(good)})
    assert created.status_code == 201, created.content
    assert created.json()["files"] == ["SKILL.md", "notes.txt"]
    refused = api.post(f"/skills/proposals/{created.json()['id']}/decision", {"approve": False})
    assert refused.json()["status"] == "refused"
    assert api.get("/skills").json() == {
        "skills": [], "proposals": [], "repository": [], "problems": []
    }  # fmt: skip
    assert repository.branches("skills", skill_proposals.PREFIX) == []

    cases = {
        json.dumps({"path": str(tmp_path / "nowhere")}): f"{tmp_path / 'nowhere'}: no such folder.",
        json.dumps({"path": str(tmp_path)}): f"No SKILL.md in {tmp_path}: a skill is a folder"
        " with one at its top.",
        json.dumps({"path": str(folder(tmp_path, "---\nname: x\n---\n"))}): "SKILL.md: the front"
        " matter has no description.",
        json.dumps({"path": str(folder(tmp_path, "---\nname: A_B\ndescription: d\n---\n"))}):
            "SKILL.md: 'A_B' is not a skill name: 1 to 64 characters of a-z, 0-9 and '-', not"
            " starting or ending with '-'.",
        json.dumps({"url": "ftp://127.0.0.1/SKILL.md"}): "'ftp://127.0.0.1/SKILL.md' is not an"
        " http(s) URL.",
        json.dumps({"url": f"{served}/missing.md"}): f"{served}/missing.md answered 404 File not"
        " found.",
        json.dumps({"url": f"{served}/big.md"}): f"{served}/big.md: larger than 64 KiB.",
        json.dumps({"url": "http://u:p@127.0.0.1/SKILL.md"}): "A URL with credentials in it is"
        " not imported: they would be recorded.",
        json.dumps({"path": str(good), "url": f"{served}/deploy/SKILL.md"}): "Give either path"
        " (a skill's folder) or url (of a SKILL.md), not both.",
    }  # fmt: skip
    for body, message in cases.items():
        response = api.post("/skills/import", body)
        assert response.status_code == 400, (body, response.content)
        assert response.json()["error"]["message"] == message, body
    binary = folder(tmp_path, LINT, **{"x.bin": ""})
    (binary / "x.bin").write_bytes(b"\xff\xfe")
    assert api.post("/skills/import", {"path": str(binary)}).json()["error"]["message"] == (
        "x.bin is not UTF-8 text: a skill's files are text."
    )
    assert repository.branches("skills", skill_proposals.PREFIX) == []


@pytest.mark.django_db
def test_a_decision_needs_the_approve_scope_and_an_existing_proposal(
    client: Client, owner: Owner, tmp_path: Path
) -> None:
    proposal = skill_proposals.import_skill(path=str(folder(tmp_path, DEPLOY)), url="", actor=OWNER)
    actor = Api(client, tokens.create_token(owner=owner.user, name="actor").secret)

    assert (
        actor.post(f"/skills/proposals/{proposal.id}/decision", {"approve": True}).status_code
        == 403
    )
    assert skill_proposals.get(proposal.id) is not None
    with pytest.raises(skill_proposals.Missing):
        skill_proposals.decide("deploy-0000000000000000", approve=True, actor=OWNER)
    with pytest.raises(skill_proposals.Missing):
        skill_proposals.decide("../x-0000000000000000", approve=True, actor=OWNER)


@pytest.mark.django_db
def test_an_agent_s_proposal_waits_like_an_import(tmp_path: Path) -> None:
    files = {"SKILL.md": DEPLOY.encode(), "scripts/check.sh": b"echo ok\n"}
    proposal = skill_proposals.propose(files, author="run:7", source="run:7")
    again = skill_proposals.propose(files, author="run:7", source="run:7")

    assert proposal.id == again.id
    assert (proposal.author, proposal.files) == ("run:7", ["SKILL.md", "scripts/check.sh"])
    assert skills.from_memory() == ([], [])
    skill_proposals.decide(proposal.id, approve=True, actor=OWNER)
    (offered,), _ = skills.from_memory()
    loaded = skills.load(offered, repository_path="", file="scripts/check.sh")
    assert loaded.text == "echo ok\n"
    with pytest.raises(skills.SkillError, match="leaves the skill's folder"):
        skills.load(offered, repository_path="", file="../deploy/SKILL.md")
    with pytest.raises(skills.SkillError, match="already exactly this"):
        skill_proposals.propose(files, author="run:7", source="run:7")
    assert framing.skills("") == ""


def proposing(mission: Mission, turns: list[dict[str, Any]]) -> Run:
    run = runs.start_run(
        account=mission,
        program="agent",
        input={
            "goal": "Share what you learnt.",
            "provider": "scripted",
            "model": "scripted",
            "tools": ["skill_propose"],
            "script": {"turns": turns},
        },
    )
    Worker(lease_seconds=30).run_until_idle()
    return run


@pytest.mark.django_db(transaction=True)
def test_an_agent_proposes_a_skill_with_skill_propose_and_it_waits_for_the_owner(
    seeded_catalog: None,
) -> None:
    mission = Mission.objects.create(project=Project.objects.create(name="p"), goal="g")
    run = proposing(
        mission,
        [
            calls(
                (
                    "skill_propose",
                    {
                        "name": "deploy",
                        "description": "Deploy:\n  blue-green.\n---",
                        "body": "Switch the router last.",
                        "files": {"scripts/check.sh": "echo ok\n"},
                    },
                ),
                (
                    "skill_propose",
                    {"name": "bad", "description": "x", "body": "", "files": {"../escape.sh": "x"}},
                ),
            ),
            FINISH,
        ],
    )

    run.refresh_from_db()
    assert run.status == "done", run.error
    results = [s.result for s in Step.objects.filter(run=run, kind="tool_call").order_by("seq")]
    assert "Proposed skill deploy as deploy-" in str(results[0]), results
    assert "'../escape.sh' leaves the skill's folder" in str(results[1]), results
    (proposal,) = skill_proposals.pending()
    assert (proposal.name, proposal.author, proposal.description) == (
        "deploy",
        f"run:{run.pk}",
        "Deploy: blue-green. ---",
    )
    assert proposal.files == ["SKILL.md", "scripts/check.sh"]
    assert skills.from_memory() == ([], [])
    skill_proposals.decide(proposal.id, approve=True, actor=OWNER)
    assert [s["name"] for s in skills.from_memory()[0]] == ["deploy"]


@pytest.mark.django_db
def test_an_approval_cut_short_before_its_branch_was_dropped_is_finished_by_the_next(
    tmp_path: Path,
) -> None:
    proposal = skill_proposals.import_skill(path=str(folder(tmp_path, DEPLOY)), url="", actor=OWNER)
    # As if the decision had committed the skill and died before dropping the branch.
    branch = skill_proposals.PREFIX + proposal.id
    with store.locked("skills") as row:
        tip = repository.head("skills", branch)
        row.head = repository.commit(
            "skills", row.head, [repository.Change("skills/deploy/SKILL.md",
            repository.read("skills", [f"{tip}:skills/deploy/SKILL.md"]).__next__()[1])], "landed"
        )  # fmt: skip
        row.save()
    landed = repository.head("skills")

    skill_proposals.decide(proposal.id, approve=True, actor=OWNER)

    assert repository.head("skills") == landed  # nothing committed twice
    assert repository.branches("skills", skill_proposals.PREFIX) == []


@pytest.mark.django_db
def test_proposals_stop_at_a_bound_until_the_owner_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(skill_proposals, "MAX_PENDING", 1)
    first = skill_proposals.propose({"SKILL.md": DEPLOY.encode()}, author="run:1", source="run:1")
    other = DEPLOY.replace("blue-green", "canaries").encode()

    with pytest.raises(skills.SkillError, match="1 skill proposals already wait for the owner"):
        skill_proposals.propose({"SKILL.md": other}, author="run:1", source="run:1")
    skill_proposals.decide(first.id, approve=False, actor=OWNER)
    assert skill_proposals.propose({"SKILL.md": other}, author="run:1", source="run:1").id
