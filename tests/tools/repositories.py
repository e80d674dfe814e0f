"""Git repositories for the offline missions to play on: any files in one commit, or the demo's
calc project, where the sandbox can reach them."""

from __future__ import annotations

from pathlib import Path

from missions import demo
from tools import workspace


def repository(base: Path, files: dict[str, str]) -> Path:
    """A git repository of `files`, in one commit, where the sandbox can reach it."""
    repo = base / "repo"
    repo.mkdir(parents=True)
    for name, content in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content)
    workspace.host_git(repo, "init", "--quiet", "--initial-branch=main")
    workspace.host_git(repo, "add", "--all")
    workspace.host_git(repo, "commit", "--quiet", "-m", "First commit: the project as it is")
    return repo


def calc(base: Path, *, fixed: bool = False) -> Path:
    """The demo's calc project: its tests fail, or pass once `fixed`."""
    source = demo.BUGGY.replace(demo.BUGGY_LINE, demo.FIXED_LINE) if fixed else demo.BUGGY
    return repository(
        base,
        {
            "calc.py": source,
            "test_calc.py": demo.TESTS,
            "README.md": demo.README,
            ".gitignore": demo.GITIGNORE,
        },
    )
