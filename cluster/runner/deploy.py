"""The runner's own code on a node: its version, its digest, and `install` (the hot swap).

A node root holds `runner/versions/<version>/cluster/runner/...` and `runner/current`, a symlink
to the active version. `install` writes a new version beside the others, checks it (digest, every
file compiles, its `--self-test` passes) and only then renames a new symlink over `current`: a
runner process already started keeps its code, the next connection starts the new one. A failed
install leaves `current` as it was. Environments (in the state directory) are never touched.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from cluster.runner import files
from cluster.runner.protocol import NAME, invalid

PACKAGE = Path(__file__).resolve().parent
DIGEST_FILE = "DIGEST"
SELF_TEST_SECONDS = 60
MAX_FILES = 200
MAX_TREE_BYTES = 16 << 20
# The deployed tree: the runner package, and an empty `cluster/__init__.py` so that `cluster` is a
# regular package there (a namespace package would lose to any other `cluster` on the path).
PATH = re.compile(r"^cluster/(__init__\.py|runner/([A-Za-z0-9_]+/)*[A-Za-z0-9_][A-Za-z0-9_.-]*)$")
# Runs the new tree's `python -m cluster.runner --self-test` from that tree alone (-I: no user
# site, no PYTHONPATH, not the current directory).
BOOT = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1));"
    " runpy.run_module('cluster.runner', run_name='__main__', alter_sys=True)"
)


def source_files() -> dict[str, bytes]:
    """This runner's tree as `install` takes it (paths relative to a version directory)."""
    tree = {"cluster/__init__.py": b""}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" not in path.parts:
            tree[f"cluster/runner/{path.relative_to(PACKAGE).as_posix()}"] = path.read_bytes()
    return tree


def tree_digest(tree: dict[str, bytes]) -> str:
    """sha256 over the sorted (path, content) pairs, each length-prefixed (8 bytes, big endian)."""
    digest = hashlib.sha256()
    for path in sorted(tree):
        name, content = path.encode(), tree[path]
        digest.update(len(name).to_bytes(8, "big") + name + len(content).to_bytes(8, "big"))
        digest.update(content)
    return digest.hexdigest()


def node_root() -> Path | None:
    """The node root this code is deployed under (`<root>/runner/versions/<v>/cluster/runner`),
    or None (a checkout: the control plane's own node)."""
    if PACKAGE.parents[2].name == "versions" and PACKAGE.parents[3].name == "runner":
        return PACKAGE.parents[4]
    return None


def running_version() -> str:
    if node_root() is not None:
        return PACKAGE.parents[1].name
    return "dev-" + tree_digest(source_files())[:12]


def install(root: Path, params: dict[str, Any]) -> dict[str, Any]:
    """1. Check the request: version, paths, digest, every .py compiles. 2. Write the version
    aside and run its self-test. 3. Rename it into `versions/`, then a new `current` symlink over
    the old one (atomic), fsyncing each directory."""
    version = params.get("version")
    if not isinstance(version, str) or not NAME.match(version):
        raise invalid(f"version must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}, not {version!r}")
    tree = _tree(params.get("files"))
    given = params.get("digest")
    computed = tree_digest(tree)
    if given != computed:
        raise invalid(f"digest mismatch: the files hash to {computed}, the request says {given!r}")
    for path, content in tree.items():
        if path.endswith(".py"):
            try:
                compile(content, path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as error:
                raise invalid(f"files: {path} does not compile: {error}") from None
    home = root / "runner"
    versions = home / "versions"
    versions.mkdir(mode=0o755, parents=True, exist_ok=True)
    target = versions / version
    with files.locked(home / "install.lock"):
        if target.is_dir():
            have = (target / DIGEST_FILE).read_text().strip()
            if have != computed:
                raise invalid(f"version {version} is already installed with digest {have}")
        else:
            _build(versions, version, tree, computed)
        current = home / "current"
        previous = current.readlink().name if current.is_symlink() else None
        link = home / f".current-{secrets.token_hex(4)}"
        link.symlink_to(f"versions/{version}")
        link.replace(current)
        files.fsync_dir(home)
    return {"previous": previous, "current": version}


def _tree(value: Any) -> dict[str, bytes]:
    if not isinstance(value, dict) or not value:
        raise invalid("files must be a non-empty object of relative path: base64")
    if len(value) > MAX_FILES:
        raise invalid(f"files: more than {MAX_FILES} files")
    tree = {}
    for path, encoded in value.items():
        if not isinstance(path, str) or not PATH.match(path) or "/." in path:
            raise invalid(f"files: {path!r} is not a path under cluster/runner/")
        if not isinstance(encoded, str):
            raise invalid(f"files: {path} must be base64")
        try:
            tree[path] = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as error:
            raise invalid(f"files: {path} is not valid base64: {error}") from None
    if sum(len(content) for content in tree.values()) > MAX_TREE_BYTES:
        raise invalid(f"files: more than {MAX_TREE_BYTES} bytes")
    if "cluster/runner/__main__.py" not in tree:
        raise invalid("files: cluster/runner/__main__.py is missing")
    return tree


def _build(versions: Path, version: str, tree: dict[str, bytes], digest: str) -> None:
    for leftover in versions.glob(f".tmp-{version}-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    building = versions / f".tmp-{version}-{secrets.token_hex(4)}"
    building.mkdir(mode=0o755)
    try:
        for path, content in tree.items():
            file = building / path
            file.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            files.write_atomic(file, content, mode=0o644)
        (building / DIGEST_FILE).write_text(digest + "\n")
        checked = subprocess.run(  # noqa: S603 (our interpreter, the tree just written)
            [sys.executable, "-I", "-c", BOOT, str(building), "--self-test"],
            capture_output=True,
            text=True,
            timeout=SELF_TEST_SECONDS,
            cwd=building,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            check=False,
        )
        if checked.returncode != 0:
            shown = (checked.stdout + checked.stderr).strip()[-2000:]
            raise invalid(
                f"the new runner's self-test failed (exit code {checked.returncode}): {shown}"
            )
        for directory, _dirs, _names in os.walk(building):
            files.fsync_dir(Path(directory))
        building.rename(versions / version)
        files.fsync_dir(versions)
    except subprocess.TimeoutExpired:
        shutil.rmtree(building, ignore_errors=True)
        raise invalid(f"the new runner's self-test did not end in {SELF_TEST_SECONDS} s") from None
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
