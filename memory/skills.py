"""Skills: folders holding a `SKILL.md` (YAML front matter with `name` and `description`, then a
Markdown body) and optional files (scripts, references), offered to a run by name.

Two sources, merged once per run at launch (`offered`) and frozen in its input, so its prompt
never changes mid-run:

- the project's repository: `.agents/skills/<name>/SKILL.md` and `.claude/skills/<name>/SKILL.md`
  at the commit the run starts from, read with git plumbing in the host-owned staging repository
  (`tools.workspace`: our configuration, never the project's, never a worktree an agent touched),
  every read bounded (`tools.bounded_git`);
- memory's `skills` scope: its repository holds each approved skill under `skills/<name>/`, beside
  the scope's notes (`notes/`, `MEMORY.md`), so a skill named like a folder of notes never
  collides with them. Skills enter it only through a proposal the owner approved
  (`memory.skill_proposals`).

Only a skill's name and one line of its description reach the run's first message (as data,
`index`); its body and files are read on demand by `load_skill` (`memory.skill_tools`). Nothing
here runs or interprets what a skill holds beyond its front matter (`yaml.safe_load`, bounded).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from memory import repository
from tools import bounded_git, workspace
from tools.base import ToolError

SCOPE = "skills"  # the memory scope
FOLDER = "skills"  # where its repository keeps them: skills/<name>/SKILL.md
SKILL_FILE = "SKILL.md"
REPOSITORY_ROOTS = (".agents/skills", ".claude/skills")  # first wins on a name in both
PIN_REF = "refs/agentos/skills"  # in staging: the commit the last launch read skills at
NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
MAX_SKILL_MD = 64 << 10
MAX_FRONT_MATTER = 8 << 10
MAX_DESCRIPTION = 1024
MAX_FILE = 128 << 10  # any other file of a skill
MAX_FILES = 50  # per skill, SKILL.md included
MAX_TOTAL = 1 << 20  # a skill's files together
MAX_PATH = 200
MAX_SKILLS = 100  # offered to one run
INDEX_DESCRIPTION = 200  # characters of a description on its index line
MAX_LISTING = 4 << 20  # `ls-tree` output read from a project's repository


class SkillError(ValueError):
    """A skill that cannot be read, written or offered, with what is wrong."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str  # one line, whitespace collapsed
    body: str


def parse(text: str, *, where: str = SKILL_FILE) -> Skill:
    """The skill a `SKILL.md` holds, or `SkillError` saying precisely what is malformed. Only the
    front matter is parsed (YAML, safe loader, at most `MAX_FRONT_MATTER` bytes); the body is
    kept as text."""
    if len(text.encode()) > MAX_SKILL_MD:
        raise SkillError(f"{where}: larger than {MAX_SKILL_MD // 1024} KiB.")
    lines = text.lstrip("\ufeff").split("\n")
    if lines[0].rstrip() != "---":
        raise SkillError(f"{where}: no front matter: the file starts with a '---' line.")
    end = next((i for i, line in enumerate(lines[1:], 1) if line.rstrip() == "---"), None)
    if end is None:
        raise SkillError(f"{where}: the front matter is not closed by a '---' line.")
    front = "\n".join(lines[1:end])
    if len(front.encode()) > MAX_FRONT_MATTER:
        raise SkillError(f"{where}: the front matter is larger than {MAX_FRONT_MATTER} bytes.")
    try:
        values = yaml.safe_load(front)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 2})" if mark is not None else ""
        raise SkillError(f"{where}: the front matter is not valid YAML{at}.") from None
    if not isinstance(values, dict):
        raise SkillError(f"{where}: the front matter is not a mapping of fields.")
    name, description = values.get("name"), values.get("description")
    if not isinstance(name, str) or not name.strip():
        raise SkillError(f"{where}: the front matter has no name.")
    check_name(name.strip(), where=where)
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{where}: the front matter has no description.")
    if len(description) > MAX_DESCRIPTION:
        raise SkillError(f"{where}: the description is longer than {MAX_DESCRIPTION} characters.")
    body = "\n".join(lines[end + 1 :]).strip("\n")
    return Skill(name=name.strip(), description=" ".join(description.split()), body=body)


def check_name(name: str, *, where: str = "skill") -> str:
    if not NAME.fullmatch(name):
        raise SkillError(
            f"{where}: {name[:80]!r} is not a skill name: 1 to 64 characters of a-z, 0-9 and '-',"
            " not starting or ending with '-'."
        )
    return name


def check_path(path: str) -> str:
    """A file's path inside a skill, normalised; `SkillError` for one that would leave it."""
    if not path or len(path) > MAX_PATH or "\x00" in path or "\\" in path:
        raise SkillError(f"{path[:80]!r} is not a file's path inside a skill.")
    clean = posixpath.normpath(path)
    parts = clean.split("/")
    if path.startswith("/") or clean.startswith("..") or ".." in parts or clean == ".":
        raise SkillError(f"{path[:80]!r} leaves the skill's folder: give a path inside it.")
    if any(part.startswith(".") for part in parts):
        raise SkillError(f"{path[:80]!r}: a skill's files are not hidden ones.")
    return clean


def index(skills: Iterable[dict[str, Any]]) -> str:
    """The skills a run is offered, one line each (name, source, description cut to a line):
    what its first message gives as data (`missions.engine.framing.skills`)."""
    lines = []
    for skill in skills:
        description = str(skill["description"])
        if len(description) > INDEX_DESCRIPTION:
            description = description[: INDEX_DESCRIPTION - 1] + "…"
        lines.append(f"- {skill['name']} ({skill['source']}): {description}")
    return "\n".join(lines)


# --- What a run is offered ----------------------------------------------------------------------


def offered(repository_path: str) -> tuple[list[dict[str, Any]], str]:
    """The skills a run starts with, and the commit of the project's repository they were read at
    ("" without a repository, or one with no commit): the repository's first, then the approved
    ones of memory whose names are not taken, at most `MAX_SKILLS`. A malformed skill is left
    out (`GET /api/v1/skills?project=` says why)."""
    found, commit = [], ""
    if repository_path:
        commit, listed, _problems = from_repository(repository_path)
        found += listed
    listed, _problems = from_memory()
    taken = {skill["name"] for skill in found}
    found += [skill for skill in listed if skill["name"] not in taken]
    return found[:MAX_SKILLS], commit


def from_repository(path: str) -> tuple[str, list[dict[str, Any]], list[str]]:
    """(commit, skills, problems) of the project's repository at its default branch head, pinned
    in the staging repository (`PIN_REF`) so that `load_skill` reads the same commit later."""
    try:
        commit = workspace.pin_project_head(path, PIN_REF)
    except ToolError:
        return "", [], []  # no commit yet: nothing to offer
    try:
        return _read_repository(workspace.staging(path), commit)
    except ToolError as error:  # git stopped (too slow): the run starts without them
        return commit, [], [f"The project's repository: {error}"]


def _read_repository(stage: Path, commit: str) -> tuple[str, list[dict[str, Any]], list[str]]:
    listed = bounded_git.run(
        stage, "ls-tree", "-r", "-z", "-l", "--full-tree", commit, "--", *REPOSITORY_ROOTS,
        limit=MAX_LISTING,
    )  # fmt: skip
    wanted: dict[str, tuple[str, str]] = {}  # folder -> (blob, where)
    problems = []
    for mode, kind, blob, size, name in _entries(listed.out):
        root, _, rest = name.rpartition("/")  # .agents/skills/<name>, SKILL.md
        if root.rpartition("/")[0] not in REPOSITORY_ROOTS or rest != SKILL_FILE:
            continue
        if kind != "blob" or mode == "120000":
            problems.append(f"{name}: not a plain file.")
        elif int(size) > MAX_SKILL_MD:
            problems.append(f"{name}: larger than {MAX_SKILL_MD // 1024} KiB.")
        elif len(wanted) >= MAX_SKILLS:
            problems.append(f"{name}: more than {MAX_SKILLS} skills, left out.")
        else:
            wanted[root] = (blob, name)
    texts = _blobs(stage, [blob for blob, _ in wanted.values()])
    skills: list[dict[str, Any]] = []
    by_root = sorted(wanted.items(), key=lambda item: (REPOSITORY_ROOTS.index(
        item[0].rpartition("/")[0]), item[0]))  # fmt: skip
    for root, (blob, name) in by_root:
        try:
            skill = _checked(texts.get(blob, b""), name, root.rpartition("/")[2])
        except SkillError as error:
            problems.append(str(error))
            continue
        if any(s["name"] == skill.name for s in skills):
            continue  # .agents first, then .claude
        skills.append(_entry(skill, "repository", commit, root))
    return commit, skills, problems


def from_memory() -> tuple[list[dict[str, Any]], list[str]]:
    """(skills, problems) of memory's `skills` scope at its tip: only what the owner approved."""
    tip = repository.head(SCOPE)
    files = repository.files(SCOPE, tip, under=FOLDER)
    wanted = {
        path: blob
        for path, blob in files.items()
        if re.fullmatch(rf"{FOLDER}/[^/]+/{re.escape(SKILL_FILE)}", path)
    }
    contents = dict(repository.read(SCOPE, sorted(set(wanted.values()))))
    skills, problems = [], []
    for path, blob in sorted(wanted.items()):
        root = path.rpartition("/")[0]
        try:
            skill = _checked(contents[blob], path, root.rpartition("/")[2])
        except SkillError as error:
            problems.append(str(error))
            continue
        skills.append(_entry(skill, "memory", tip, root))
    return skills, problems


def _checked(content: bytes, where: str, folder: str) -> Skill:
    try:
        text = content.decode()
    except UnicodeDecodeError:
        raise SkillError(f"{where}: not UTF-8 text.") from None
    skill = parse(text, where=where)
    if skill.name != folder:
        raise SkillError(f"{where}: its name {skill.name!r} is not its folder's ({folder!r}).")
    return skill


def _entry(skill: Skill, source: str, commit: str, path: str) -> dict[str, Any]:
    """What a run's input keeps of a skill: what the index shows, and where `load_skill` finds
    it (a commit of the project's repository or of the skills scope, and the skill's folder)."""
    return {
        "name": skill.name,
        "description": skill.description,
        "source": source,
        "commit": commit,
        "path": path,
    }


# --- Reading a skill on demand ------------------------------------------------------------------


@dataclass(frozen=True)
class Loaded:
    text: str
    files: dict[str, int]  # every file of the skill: path inside it -> bytes (-1: not measured)


def load(skill: dict[str, Any], *, repository_path: str, file: str = "") -> Loaded:
    """The skill's `SKILL.md` body (or the text of one of its files), read at the commit the run
    was offered it at; `SkillError` for a path leaving the skill, a file it lacks, one too big or
    not text."""
    wanted = check_path(file) if file else SKILL_FILE
    folder = str(skill["path"])
    if skill["source"] == "repository":
        if not repository_path:
            raise SkillError("This run has no project repository to read the skill from.")
        staged = workspace.staging(repository_path)
        files = _repository_files(staged, str(skill["commit"]), folder)
        stage: Path | None = staged
    else:
        # Sizes were bounded when the owner approved it (`memory.skill_proposals`).
        stage = None
        files = {
            path.removeprefix(folder + "/"): (blob, -1)
            for path, blob in repository.files(SCOPE, str(skill["commit"]), under=folder).items()
        }
    if wanted not in files:
        raise SkillError(f"The skill {skill['name']} has no file {wanted!r}.")
    blob, size = files[wanted]
    if size > MAX_FILE:
        raise SkillError(f"{wanted} is larger than {MAX_FILE // 1024} KiB: not loaded.")
    if stage is not None:
        content = _blobs(stage, [blob]).get(blob, b"")
    else:
        ((_, content),) = repository.read(SCOPE, [blob])
    try:
        text = content[: MAX_FILE + 1].decode()
    except UnicodeDecodeError:
        raise SkillError(f"{wanted} is not UTF-8 text: not loaded.") from None
    if len(content) > MAX_FILE:
        raise SkillError(f"{wanted} is larger than {MAX_FILE // 1024} KiB: not loaded.")
    if not file:
        text = parse(text, where=f"{folder}/{SKILL_FILE}").body
    sizes = {path: found for path, (_, found) in files.items()}
    return Loaded(text=text, files=sizes)


def _repository_files(stage: Path, commit: str, folder: str) -> dict[str, tuple[str, int]]:
    listed = bounded_git.run(
        stage, "ls-tree", "-r", "-z", "-l", "--full-tree", commit, "--", folder + "/",
        limit=MAX_LISTING,
    )  # fmt: skip
    found = {}
    for mode, kind, blob, size, name in _entries(listed.out):
        if kind == "blob" and mode != "120000" and name.startswith(folder + "/"):
            found[name.removeprefix(folder + "/")] = (blob, int(size))
        if len(found) >= MAX_FILES * 4:
            break
    return found


def _entries(out: bytes) -> Iterable[tuple[str, str, str, str, str]]:
    """(mode, type, blob, size, path) of `ls-tree -l -z` output; a last entry cut short by the
    bound is left out."""
    for entry in out.split(b"\0")[:-1]:
        meta, tab, name = entry.partition(b"\t")
        fields = meta.split()
        if tab and len(fields) == 4:
            yield (*(f.decode() for f in fields), name.decode(errors="replace"))  # type: ignore[misc]


def _blobs(stage: Path, blobs: list[str]) -> dict[str, bytes]:
    """The blobs' contents (each already known to be at most `MAX_FILE`), through one bounded
    `cat-file --batch` on the staging repository."""
    if not blobs:
        return {}
    wanted = sorted(set(blobs))
    done = bounded_git.run(
        stage, "cat-file", "--batch", stdin="\n".join(wanted).encode() + b"\n",
        limit=len(wanted) * (max(MAX_SKILL_MD, MAX_FILE) + 200),
    )  # fmt: skip
    out, position, found = done.out, 0, {}
    for blob in wanted:
        end = out.find(b"\n", position)
        if end < 0:
            break
        header = out[position:end].split()
        if len(header) != 3 or header[1] != b"blob":
            position = end + 1
            continue
        size = int(header[2])
        found[blob] = out[end + 1 : end + 1 + size]
        position = end + 1 + size + 1
    return found
