"""Proposed skills: what enters memory's `skills` scope only once the owner approved its diff.

The owner imports a skill from a local folder or an http(s) URL, an agent proposes one
(`skill_propose`): either way the files are checked (`check_files`), scrubbed of anything shaped
like a secret (what the owner sees is what lands), and committed on a branch of the scope's
repository of their own, `refs/heads/skill-proposals/<name>-<digest>`, on top of the scope's tip.
The branch is the proposal: no other state, so a process killed at any point leaves either no
branch or a whole one. The digest is of the files themselves, so deciding on a proposal's id
decides on exactly those bytes (approving X never lets Y through), and proposing the same files
again is the same proposal.

Approved (`decide`), the files replace the skill's folder `skills/<name>/` on the scope's main
branch in one commit, under the scope's lock (`memory.store.locked`), then the branch is dropped;
refused, the branch is dropped. A decision cut short before the drop is finished by the next one
(the skill is already as proposed). The nightly clean-up of note proposals
(`store.drop_proposals`) never sees these branches: another prefix.

A URL is fetched by the control plane as the owner's act: http(s) only, no credentials in it,
bounded in size and time, redirects followed only to http(s); nothing it returns runs.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction

from agentos.core import audit, scrubber
from agentos.core.models import AuditEvent
from memory import repository, store
from memory.skills import (
    FOLDER,
    MAX_FILE,
    MAX_FILES,
    MAX_SKILL_MD,
    MAX_TOTAL,
    SCOPE,
    SKILL_FILE,
    Skill,
    SkillError,
    check_name,
    check_path,
    parse,
)

PREFIX = "refs/heads/skill-proposals/"
FETCH_SECONDS = 10.0
MAX_REDIRECTS = 3
MAX_SOURCE = 500
DIGEST = re.compile(r"[0-9a-f]{16}")
MAX_PENDING = 50  # proposals waiting at once: an agent looping on skill_propose stops there


@dataclass(frozen=True)
class Proposal:
    id: str  # <name>-<digest>: what the owner decides on
    name: str
    description: str
    author: str  # "owner", or the run that proposed it ("run:<id>")
    source: str  # the folder or URL it was imported from, or the run
    diff: str  # against the skill as approved now ("" when none is)
    files: list[str]
    created_at: datetime


# --- Checking --------------------------------------------------------------------------------


def check_files(files: dict[str, bytes]) -> tuple[Skill, dict[str, bytes]]:
    """The skill its files make, and the files as they will be stored (text, scrubbed); else a
    precise `SkillError` (no SKILL.md, too many or too big files, not text, a path leaving the
    folder, a malformed front matter)."""
    if SKILL_FILE not in files:
        raise SkillError(f"No {SKILL_FILE}: a skill is a folder with a {SKILL_FILE} at its top.")
    if len(files) > MAX_FILES:
        raise SkillError(f"A skill has at most {MAX_FILES} files; this one has {len(files)}.")
    if sum(len(content) for content in files.values()) > MAX_TOTAL:
        raise SkillError(f"A skill's files are at most {MAX_TOTAL // 1024} KiB together.")
    clean: dict[str, bytes] = {}
    for path, content in sorted(files.items()):
        name = check_path(path)
        limit = MAX_SKILL_MD if name == SKILL_FILE else MAX_FILE
        if len(content) > limit:
            raise SkillError(f"{name} is larger than {limit // 1024} KiB.")
        try:
            text = content.decode()
        except UnicodeDecodeError:
            raise SkillError(f"{name} is not UTF-8 text: a skill's files are text.") from None
        clean[name] = scrubber.scrub(text).encode()
    skill = parse(clean[SKILL_FILE].decode())
    return skill, clean


def digest(files: dict[str, bytes]) -> str:
    hashed = hashlib.sha256()
    for path, content in sorted(files.items()):
        hashed.update(b"%d:%s\0%d:" % (len(path.encode()), path.encode(), len(content)))
        hashed.update(content)
    return hashed.hexdigest()[:16]


# --- Reading what the owner imports ----------------------------------------------------------


def read_folder(path: str) -> dict[str, bytes]:
    """The files of a skill's folder on this machine (or of the folder of the SKILL.md named):
    plain files only, hidden ones left out, bounded before anything is read whole."""
    given = Path(path).expanduser()
    folder = given.parent if given.name == SKILL_FILE and given.is_file() else given
    if not folder.is_dir():
        raise SkillError(f"{path}: no such folder.")
    if not (folder / SKILL_FILE).is_file():
        raise SkillError(f"No {SKILL_FILE} in {folder}: a skill is a folder with one at its top.")
    files: dict[str, bytes] = {}
    total = 0
    for top, folders, names in os.walk(folder, followlinks=False):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            found = Path(top) / name
            relative = found.relative_to(folder).as_posix()
            if found.is_symlink() or not found.is_file():
                raise SkillError(f"{relative} is not a plain file: a skill's files are.")
            if len(files) >= MAX_FILES:
                raise SkillError(f"A skill has at most {MAX_FILES} files.")
            size = found.stat().st_size
            total += size
            if size > max(MAX_FILE, MAX_SKILL_MD) or total > MAX_TOTAL:
                raise SkillError(f"{relative}: the skill's files are too big.")
            files[relative] = found.read_bytes()
    return files


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        check_url(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SkillError(f"{url[:200]!r} is not an http(s) URL.")
    if parts.username or parts.password:
        raise SkillError("A URL with credentials in it is not imported: they would be recorded.")
    return url


def fetch(url: str) -> dict[str, bytes]:
    """A skill's `SKILL.md` at an http(s) URL (a single-file skill), at most `MAX_SKILL_MD`
    bytes, within `FETCH_SECONDS`; no proxy from the environment."""
    check_url(url)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _Redirects())
    request = urllib.request.Request(url, headers={"User-Agent": "agentos-skill-import"})  # noqa: S310  # http(s) only, checked above
    deadline = time.monotonic() + FETCH_SECONDS
    try:
        with opener.open(request, timeout=FETCH_SECONDS) as response:
            content = bytearray()
            while len(content) <= MAX_SKILL_MD:
                if time.monotonic() > deadline:
                    raise SkillError(f"{url}: took longer than {FETCH_SECONDS:.0f} s.")
                chunk = response.read(16 << 10)
                if not chunk:
                    break
                content += chunk
    except urllib.error.HTTPError as error:
        raise SkillError(f"{url} answered {error.code} {error.reason}.") from None
    except (urllib.error.URLError, OSError) as error:
        why = getattr(error, "reason", error)
        raise SkillError(f"{url} could not be fetched: {why}.") from None
    if len(content) > MAX_SKILL_MD:
        raise SkillError(f"{url}: larger than {MAX_SKILL_MD // 1024} KiB.")
    return {SKILL_FILE: bytes(content)}


# --- Proposals -------------------------------------------------------------------------------


def propose(files: dict[str, bytes], *, author: str, source: str) -> Proposal:
    """The files proposed as a skill (checked, scrubbed) on a branch of their own; the proposal
    with its diff. The same files proposed again are the same proposal. `SkillError` when they
    are malformed or already what the scope holds."""
    skill, clean = check_files(files)
    ident = f"{skill.name}-{digest(clean)}"
    branch = PREFIX + ident
    with store.locked(SCOPE) as row:
        if not repository.head(SCOPE, branch):
            if len(repository.branches(SCOPE, PREFIX)) >= MAX_PENDING:
                raise SkillError(
                    f"{MAX_PENDING} skill proposals already wait for the owner: no more until"
                    " some are decided."
                )
            changes = _changes(_files_at(row.head, skill.name), clean, skill.name)
            if not changes:
                raise SkillError(f"The skill {skill.name} is already exactly this.")
            summary = scrubber.scrub(f"Skill proposal: {skill.name}")
            where = scrubber.scrub(" ".join(source.split()))[:MAX_SOURCE]
            message = f"{summary}\n\nAuthor: {author}\nSource: {where}\n"
            repository.commit(SCOPE, row.head, changes, message, branch=branch)
    found = get(ident)
    if found is None:  # decided between our commit and this read
        raise SkillError(f"The proposal {ident} was decided meanwhile.")
    return found


def pending() -> list[Proposal]:
    """Every proposal waiting for the owner, newest first."""
    found = [get(branch.removeprefix(PREFIX)) for branch in repository.branches(SCOPE, PREFIX)]
    return sorted(
        (proposal for proposal in found if proposal is not None),
        key=lambda proposal: (proposal.created_at, proposal.id),
        reverse=True,
    )


def get(ident: str) -> Proposal | None:
    """The proposal `ident` names, or None (unknown, decided, or a name that is no proposal's)."""
    name, _, hashed = ident.rpartition("-")
    branch = PREFIX + ident
    try:
        check_name(name)
    except SkillError:
        return None
    if not DIGEST.fullmatch(hashed):
        return None
    tip = repository.head(SCOPE, branch)
    if not tip:
        return None
    proposed = _files_at(tip, name)
    current = _files_at(repository.head(SCOPE), name)
    _commit, date, message = repository.describe(SCOPE, tip)
    fields = dict(line.partition(": ")[::2] for line in message.splitlines() if ": " in line)
    skill = parse(proposed[SKILL_FILE].decode())
    return Proposal(
        id=ident,
        name=name,
        description=skill.description,
        author=fields.get("Author", ""),
        source=fields.get("Source", ""),
        diff=_diff(name, current, proposed),
        files=sorted(proposed),
        created_at=datetime.fromisoformat(date),
    )


def decide(ident: str, *, approve: bool, actor: audit.Actor) -> Proposal:
    """The owner's decision on a proposal: approved, its files become the skill (one commit on
    the scope's main branch); refused, it is dropped. The proposal as it was. `SkillError`
    (`missing=True`) for an unknown or already decided one."""
    found = get(ident)
    if found is None:
        raise Missing(f"No skill proposal {ident!r} waiting for the owner.")
    branch = PREFIX + ident
    with transaction.atomic(), store.locked(SCOPE) as row:
        tip = repository.head(SCOPE, branch)
        if not tip:
            raise Missing(f"No skill proposal {ident!r} waiting for the owner.")
        proposed = _files_at(tip, found.name)
        if f"{found.name}-{digest(proposed)}" != ident:
            raise SkillError(f"The proposal {ident} does not hold what its id names: refused.")
        if approve:
            changes = _changes(_files_at(row.head, found.name), proposed, found.name)
            if changes:  # else: approved before, cut short before its branch was dropped
                message = (
                    f"Approved skill: {found.name}\n\nAuthor: {found.author}\n"
                    f"Source: {found.source}\nApproved-by: {actor.by}\n"
                )
                row.head = repository.commit(SCOPE, row.head, changes, message)
                row.save(update_fields=["head", "updated_at"])
        audit.record_by(
            AuditEvent.Kind.MEMORY_CHANGED, actor, scope=SCOPE, path=f"{FOLDER}/{found.name}",
            change="skill approved" if approve else "skill refused", by=actor.by, proposal=ident,
        )  # fmt: skip
        # Last: a decision cut short before this is finished by the next one.
        repository.drop(SCOPE, branch)
    return found


def import_skill(*, path: str, url: str, actor: audit.Actor) -> Proposal:
    """The owner's import (the API's and `manage.py skill_import`'s): a folder on this machine or
    the URL of a SKILL.md, read or fetched, proposed, and in the security log. `SkillError` saying
    what is wrong."""
    if bool(path) == bool(url):
        raise SkillError("Give either path (a skill's folder) or url (of a SKILL.md), not both.")
    files = read_folder(path) if path else fetch(url)
    proposal = propose(files, author="owner", source=path or url)
    audit.record_by(
        AuditEvent.Kind.MEMORY_CHANGED, actor, scope=SCOPE, path=f"{FOLDER}/{proposal.name}",
        change="skill proposed", by=actor.by, proposal=proposal.id,
    )  # fmt: skip
    return proposal


class Missing(SkillError):
    """No such proposal waiting (answered 404)."""


def _files_at(commit: str, name: str) -> dict[str, bytes]:
    """The files of skill `name` at a commit of the scope: path inside the skill -> bytes."""
    folder = f"{FOLDER}/{name}"
    listed = repository.files(SCOPE, commit, under=folder + "/")
    contents = dict(repository.read(SCOPE, sorted(set(listed.values()))))
    return {path.removeprefix(folder + "/"): contents[blob] for path, blob in listed.items()}


def _changes(
    current: dict[str, bytes], proposed: dict[str, bytes], name: str
) -> list[repository.Change]:
    folder = f"{FOLDER}/{name}"
    changes = [
        repository.Change(f"{folder}/{path}", content)
        for path, content in sorted(proposed.items())
        if current.get(path) != content
    ]
    changes += [
        repository.Change(f"{folder}/{path}", None)
        for path in sorted(current)
        if path not in proposed
    ]
    return changes


def _diff(name: str, current: dict[str, bytes], proposed: dict[str, bytes]) -> str:
    parts = []
    for path in sorted({*current, *proposed}):
        old, new = current.get(path), proposed.get(path)
        if old == new:
            continue
        where = f"{FOLDER}/{name}/{path}"
        lines = difflib.unified_diff(
            (old or b"").decode(errors="replace").splitlines(keepends=True),
            (new or b"").decode(errors="replace").splitlines(keepends=True),
            fromfile=f"a/{where}" if old is not None else "/dev/null",
            tofile=f"b/{where}" if new is not None else "/dev/null",
        )
        parts.append(f"diff --git a/{where} b/{where}\n" + "".join(lines))
    return "".join(parts)
