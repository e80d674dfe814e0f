"""The worktree transfer's format and both of its ends (`cluster.runner.treesync`), on hostile
trees: links where directories were, FIFOs, paths that try to leave the tree."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from cluster import sandbox
from cluster.runner import treesync
from cluster.runner.handler import Handler
from cluster.runner.protocol import RpcError
from cluster.sandbox import Limits

OWNER = (os.getuid(), os.getgid())


def make_tree(top: Path) -> Path:
    (top / "src" / "deep").mkdir(parents=True)
    (top / "src" / "deep" / "a.txt").write_text("a\n")
    (top / "run.sh").write_text("#!/bin/sh\n")
    (top / "run.sh").chmod(0o755)
    (top / "link").symlink_to("src/deep/a.txt")
    (top / "empty").mkdir()
    os.mkfifo(top / "fifo")  # left out: never opened
    return top


def send(state: Path, name: str, source: Path) -> tuple[list[str], treesync.Manifest]:
    """What `cluster.shipping.ship` does, without SSH: the contents the node lacks, stored."""
    want = treesync.manifest(source)
    where = {entry["s"]: rel for rel, entry in want.items() if entry["t"] == "f"}
    lacking = treesync.missing(state, name, sorted(where))
    blobs = {
        sha: base64.b64encode(treesync.read(source, where[sha], sha)).decode() for sha in lacking
    }
    treesync.store(state, name, blobs)
    return lacking, want


def test_it_makes_the_nodes_copy_equal_sending_only_what_it_lacks(tmp_path: Path) -> None:
    source, state = make_tree(tmp_path / "source"), tmp_path / "state"
    state.mkdir()
    lacking, want = send(state, "w-1", source)
    assert len(lacking) == 2  # a.txt and run.sh; the link and directories travel in the manifest
    assert "fifo" not in want
    copy, before = treesync.checkout(state, "w-1", want, OWNER)
    assert treesync.manifest(copy) == want == before
    assert (copy / "link").readlink() == Path("src/deep/a.txt")
    assert (copy / "run.sh").stat().st_mode & 0o777 == 0o755

    # The next step: one file changed, one moved (its content already there), one removed.
    (source / "run.sh").write_text("#!/bin/sh\necho changed\n")
    (source / "src" / "deep" / "a.txt").rename(source / "moved.txt")
    (source / "link").unlink()
    lacking, want = send(state, "w-1", source)
    assert lacking == [hashlib.sha256(b"#!/bin/sh\necho changed\n").hexdigest()]
    copy, _ = treesync.checkout(state, "w-1", want, OWNER)
    assert treesync.manifest(copy) == want
    assert not (copy / "link").exists()


def test_it_never_writes_through_a_link_or_into_a_fifo_standing_in_the_way(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    top = tmp_path / "top"
    top.mkdir()
    (top / "src").symlink_to(outside)  # where the change puts a directory
    os.mkfifo(top / "f")  # where it puts a file: opening it would block
    blobs = {hashlib.sha256(b"x").hexdigest(): b"x"}
    put = {
        "src": {"t": "d", "m": 0o755},
        "src/a": {"t": "f", "m": 0o644, "s": next(iter(blobs)), "n": 1},
        "f": {"t": "f", "m": 0o600, "s": next(iter(blobs)), "n": 1},
    }
    treesync.apply(top, put, [], blobs.__getitem__, owner=OWNER)
    assert list(outside.iterdir()) == []
    assert (top / "src").is_dir()
    assert not (top / "src").is_symlink()
    assert (top / "src" / "a").read_bytes() == (top / "f").read_bytes() == b"x"
    # Applied twice is applied once; a removal under a link removes nothing beyond it.
    (top / "away").symlink_to(outside)
    (outside / "kept").write_text("kept")
    treesync.apply(top, put, ["away/kept"], blobs.__getitem__, owner=OWNER)
    assert (outside / "kept").read_text() == "kept"
    assert treesync.manifest(top)["src/a"]["s"] == next(iter(blobs))


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", "a//b", ".", "a/\0"])
def test_it_refuses_a_path_that_leaves_the_tree(tmp_path: Path, path: str) -> None:
    entry = {"t": "d", "m": 0o755}
    with pytest.raises(RpcError, match="not a relative path inside the tree"):
        treesync.apply(tmp_path, {path: entry}, [], lambda sha: b"", owner=OWNER)
    with pytest.raises(RpcError, match="not a relative path inside the tree"):
        treesync.apply(tmp_path, {}, [path], lambda sha: b"", owner=OWNER)


def test_it_refuses_content_that_does_not_match_its_hash(tmp_path: Path) -> None:
    wrong = base64.b64encode(b"other").decode()
    with pytest.raises(RpcError, match="does not match its content's sha256"):
        treesync.store(tmp_path, "w-1", {hashlib.sha256(b"x").hexdigest(): wrong})
    with pytest.raises(RpcError, match=r"tree\.name must match"):
        treesync.missing(tmp_path, "../up", [])


def test_it_keeps_a_steps_changes_and_hands_them_out_in_bounded_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = make_tree(tmp_path / "copy")
    before = treesync.manifest(copy)
    (copy / "one").write_bytes(b"1" * 10)
    (copy / "two").write_bytes(b"2" * 10)
    (copy / "link").unlink()
    kept = tmp_path / "kept"
    changes = treesync.keep(copy, before, kept)
    assert sorted(changes["put"]) == ["one", "two"]
    assert changes["remove"] == ["link"]
    assert changes["bytes"] == 20
    monkeypatch.setattr(treesync, "CHUNK_BYTES", 15)
    shas = sorted(entry["s"] for entry in changes["put"].values())
    first = treesync.fetch(kept, shas)
    assert len(first) == 1  # a second one would pass the chunk
    rest = treesync.fetch(kept, [sha for sha in shas if sha not in first])
    assert sorted([*first, *rest]) == shas


@pytest.mark.parametrize("method", ["run", "build_environment", "tree_missing", "tree_store"])
def test_the_runner_refuses_a_tree_name_that_leaves_its_state(tmp_path: Path, method: str) -> None:
    state = tmp_path / "state"
    handler = Handler(state, "n")
    built = sandbox.profile(1, ["/bin/true"], None, Limits(wall_seconds=10), sandbox._ready())
    tree = {"name": "../../escape", "manifest": {}}
    params = {
        "run": {"step_id": "s-1", "key": "k-1", "fence": 1, "profile": built, "tree": tree},
        "build_environment": {"name": "e", "version": "1", "profile": built, "tree": tree},
        "tree_missing": {"tree": tree["name"], "shas": []},
        "tree_store": {"tree": tree["name"], "blobs": {}},
    }[method]
    with pytest.raises(RpcError, match=r"tree\.name must match"):
        handler.call(method, params)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["state"]
    assert not list(state.glob("locks/tree-*"))


def test_it_moves_a_content_larger_than_a_chunk_in_parts_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(treesync, "CHUNK_BYTES", 4)
    state = tmp_path / "state"
    state.mkdir()
    data = b"0123456789"
    sha = hashlib.sha256(data).hexdigest()

    def part(offset: int, piece: bytes) -> dict[str, object]:
        encoded = base64.b64encode(piece).decode()
        return {"sha": sha, "offset": offset, "size": len(data), "data": encoded}

    treesync.store(state, "w-1", None, part(0, data[:4]))
    with pytest.raises(RpcError, match="4 bytes of it were received"):
        treesync.store(state, "w-1", None, part(8, data[8:]))
    treesync.store(state, "w-1", None, part(4, data[4:8]))
    assert treesync.missing(state, "w-1", [sha]) == [sha]  # not whole yet
    treesync.store(state, "w-1", None, part(8, data[8:]))
    assert treesync.missing(state, "w-1", [sha]) == []
    with pytest.raises(RpcError, match="does not match its sha256 once all its parts came"):
        treesync.store(state, "w-1", None, {**part(0, b"9876543210"), "size": 10})

    kept = state / "trees" / "w-1" / "incoming"
    with pytest.raises(RpcError, match="larger than a chunk: fetch it by parts"):
        treesync.fetch(kept, [sha])
    pieces = [treesync.fetch_part(kept, sha, offset) for offset in (0, 4, 8)]
    assert b"".join(base64.b64decode(str(p["data"])) for p in pieces) == data
    assert {p["size"] for p in pieces} == {10}
