"""Secret files and private directories: 0600/0700 from creation, refused when not ours."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentos import settings as product_settings
from agentos.core import database, private

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that lets files be created world-readable: what 0600 must not depend on."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def no_chmod(monkeypatch: pytest.MonkeyPatch) -> None:
    """Creation alone must give the mode: a chmod after the fact leaves a window open."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("chmod after creation")

    monkeypatch.setattr(os, "chmod", refuse)
    monkeypatch.setattr(Path, "chmod", refuse)


def test_it_creates_a_secret_file_0600_from_creation(
    tmp_path: Path, open_umask: None, no_chmod: None
) -> None:
    path = tmp_path / "secret"

    assert private.create(path, "first")
    assert not private.create(path, "second")  # a second starter keeps the first one's key

    assert mode(path) == 0o600
    assert private.read(path) == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]  # no temp file left behind


def test_it_creates_the_secret_key_0600_from_creation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_umask: None, no_chmod: None
) -> None:
    monkeypatch.delenv("AGENTOS_SECRET_KEY", raising=False)
    monkeypatch.setattr(product_settings, "DATA_DIR", tmp_path)

    key = product_settings._secret_key()

    assert len(key) > 40
    assert mode(tmp_path / "secret_key") == 0o600
    assert product_settings._secret_key() == key


def test_it_replaces_a_secret_file_whole(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "keys"
    private.create(path, "old")

    private.replace(path, "new")

    assert private.read(path) == "new"
    assert mode(path) == 0o600


def test_it_refuses_a_secret_file_others_can_read(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("key")
    path.chmod(0o644)

    with pytest.raises(private.Unsafe, match="mode 0644"):
        private.read(path)


def test_it_refuses_a_symlinked_secret_file(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    private.create(target, "planted")
    (tmp_path / "secret").symlink_to(target)

    with pytest.raises(private.Unsafe, match="symbolic link"):
        private.read(tmp_path / "secret")
    assert not private.create(tmp_path / "secret", "mine")  # never written through the link
    assert private.read(target) == "planted"


@needs_root
def test_it_refuses_a_secret_file_of_another_user(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    private.create(path, "planted")
    os.chown(path, NOBODY, NOBODY)

    with pytest.raises(private.Unsafe, match=f"belongs to uid {NOBODY}"):
        private.read(path)


# --- the runtime directory (the embedded database's socket may live there) ----------------------


def test_it_creates_the_runtime_directory_0700(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "agentos-runtime"

    assert database.private_runtime_dir(path) == path

    assert mode(path) == 0o700
    assert database.private_runtime_dir(path) == path  # ours already: accepted


def test_it_refuses_a_runtime_directory_others_can_enter(tmp_path: Path) -> None:
    path = tmp_path / "agentos-runtime"
    path.mkdir()
    path.chmod(0o755)

    with pytest.raises(private.Unsafe, match="mode 0755"):
        database.private_runtime_dir(path)
    assert mode(path) == 0o755  # not ours to fix: it existed before us


def test_it_refuses_a_runtime_directory_that_is_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "planted"
    target.mkdir(mode=0o700)
    (tmp_path / "agentos-runtime").symlink_to(target)

    with pytest.raises(private.Unsafe, match="not a directory"):
        database.private_runtime_dir(tmp_path / "agentos-runtime")


@needs_root
def test_it_refuses_a_runtime_directory_made_by_another_user(tmp_path: Path) -> None:
    path = tmp_path / "agentos-runtime"
    path.mkdir(mode=0o700)
    os.chown(path, NOBODY, NOBODY)

    with pytest.raises(private.Unsafe, match=f"belongs to uid {NOBODY}"):
        database.private_runtime_dir(path)


def test_it_creates_a_secret_file_0600_where_hard_links_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_umask: None, no_chmod: None
) -> None:
    def no_links(*args: object) -> None:
        raise PermissionError("this filesystem has no hard links")

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "secret"

    assert private.create(path, "key")

    assert (mode(path), private.read(path)) == (0o600, "key")
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]
