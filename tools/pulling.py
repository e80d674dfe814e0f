"""Pull from remote: a project's own repository (the owner's, on this machine) brought up to what
its remote holds — the branch it has checked out fast-forwarded, nothing else.

What a run pushed reaches the remote (`tools.git`), never the project's repository: runs never
write to it. Pulling is the owner's act, and it is host git on the owner's repository, whose
configuration is the owner's (trusted) — but the commits it brings in were written by an agent
(docs/design.md §19: everything an agent wrote is hostile). So no host git here interprets what
they hold: every call carries `workspace.HARDENED` (no hooks, no fsmonitor, no attributes file,
no submodule recursion) and the fast-forward turns off every filter driver the owner's
configuration defines (smudge, clean, process), so a `.gitattributes` in the pushed tree cannot
route its files through one; `ident`, end-of-line and encoding conversions are git's own data
transformations, which run nothing. The fetch checks every object it receives; the merge is
`--ff-only` and refuses to overwrite the owner's uncommitted changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tools import remotes, workspace
from tools.base import ToolError


class PullRefused(ToolError):
    """The repository cannot be fast-forwarded (no branch checked out, no remote, diverged,
    local changes in the way): the owner's to sort out, nothing was changed."""


@dataclass(frozen=True)
class Pulled:
    branch: str
    remote: str
    before: str
    after: str

    @property
    def moved(self) -> bool:
        return self.before != self.after


def fast_forward(repository: Path, *, project_id: int | None) -> Pulled:
    """Fetch the checked-out branch's upstream (its configured one, else the same name on
    `origin`) and fast-forward the branch and its files to it.

    1. The checked-out branch and its upstream, read from the owner's configuration.
    2. The upstream's commits fetched into `refs/remotes/<remote>/<branch>` (with the project's
       remote credential, if any; every object checked).
    3. Already there, or ahead: nothing to do. Diverged: refused.
    4. `merge --ff-only` to that commit, filters off."""
    bare = (
        workspace.host_git(repository, "rev-parse", "--is-bare-repository", check=False)
        if repository.is_dir()
        else None
    )
    if bare is None or bare.returncode != 0:
        raise PullRefused(f"{repository} is not a git repository (any more).")
    if bare.stdout.strip() == "true":
        raise PullRefused("This repository is bare: it has no checked-out branch to update.")
    branch = _git(repository, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
    if not branch:
        raise PullRefused("This repository has no branch checked out (a detached HEAD).")
    remote = _config(repository, f"branch.{branch}.remote") or "origin"
    upstream = _config(repository, f"branch.{branch}.merge") or f"refs/heads/{branch}"
    url = _config(repository, f"remote.{remote}.url")
    if not url or remote == ".":
        raise PullRefused(f"The branch {branch} has no remote to pull from (no {remote!r}).")
    tracking = f"refs/remotes/{remote}/{upstream.removeprefix('refs/heads/')}"
    with remotes.credentials(project_id, remote, url) as auth:
        done = workspace.host_git(
            repository,
            "-c",
            "transfer.fsckObjects=true",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-recurse-submodules",
            "--no-write-fetch-head",
            remote,
            f"+{upstream}:{tracking}",
            check=False,
            env=auth.env,
        )
        if done.returncode != 0:
            said = auth.scrub((done.stderr or done.stdout).strip())
            raise ToolError(
                f"Cannot fetch {upstream.removeprefix('refs/heads/')} from {remote}: {said}"
            )
    before = _git(repository, "rev-parse", "HEAD").strip()
    after = _git(repository, "rev-parse", f"{tracking}^{{commit}}").strip()
    pulled = Pulled(branch=branch, remote=remote, before=before, after=after)
    if after == before or _is_ancestor(repository, after, before):
        return Pulled(branch=branch, remote=remote, before=before, after=before)
    if not _is_ancestor(repository, before, after):
        raise PullRefused(
            f"{branch} and {remote}'s {upstream.removeprefix('refs/heads/')} have diverged:"
            " it cannot be fast-forwarded; merge or rebase it yourself."
        )
    merged = workspace.host_git(
        repository,
        *_no_filters(repository),
        "-c",
        "gc.auto=0",
        "merge",
        "--ff-only",
        "--no-stat",
        "--quiet",
        after,
        check=False,
    )
    if merged.returncode != 0:
        said = (merged.stderr or merged.stdout).strip()
        raise PullRefused(f"{branch} was not fast-forwarded: {said}")
    return pulled


def _no_filters(repository: Path) -> Iterator[str]:
    """`-c` pairs that turn off each filter driver the repository's configuration defines."""
    listed = _git(repository, "config", "--name-only", "--get-regexp", r"^filter\.", check=False)
    drivers = {name.removeprefix("filter.").rpartition(".")[0] for name in listed.split()}
    for driver in sorted(d for d in drivers if d):
        for key, value in (("smudge", ""), ("clean", ""), ("process", ""), ("required", "false")):
            yield from ("-c", f"filter.{driver}.{key}={value}")


def _is_ancestor(repository: Path, older: str, newer: str) -> bool:
    found = workspace.host_git(repository, "merge-base", "--is-ancestor", older, newer, check=False)
    return found.returncode == 0


def _config(repository: Path, key: str) -> str:
    return _git(repository, "config", "--get", key, check=False).strip()


def _git(repository: Path, *args: str, check: bool = True) -> str:
    return workspace.host_git(repository, *args, check=check).stdout
