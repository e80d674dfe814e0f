from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pytest_django.fixtures import Settings

from kernel import artifacts
from kernel.models import Artifact

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def data_dir(settings: Settings, tmp_path: Path) -> Path:
    settings.DATA_DIR = tmp_path
    return tmp_path


def test_it_stores_content_under_its_hash(data_dir: Path) -> None:
    content = b"hello artifacts\n"
    sha256 = hashlib.sha256(content).hexdigest()

    artifact = artifacts.store(content=content, name="hello.txt", media_type="text/plain")

    assert artifact.sha256 == sha256
    assert artifact.size == len(content)
    assert artifacts.path_of(artifact) == data_dir / "artifacts" / sha256[:2] / sha256[2:]
    with artifacts.open_artifact(artifact) as file:
        assert file.read() == content


def test_it_stores_identical_content_once() -> None:
    first = artifacts.store(content=b"same", name="a")
    second = artifacts.store(content=b"same", name="b")

    assert second.pk == first.pk
    assert Artifact.objects.filter(sha256=first.sha256).count() == 1
    assert list(artifacts.path_of(first).parent.iterdir()) == [artifacts.path_of(first)]


def test_it_leaves_no_temporary_files(data_dir: Path) -> None:
    for index in range(3):
        artifacts.store(content=f"content {index}".encode())
    artifacts.store(content=b"content 0")

    files = [path for path in (data_dir / "artifacts").rglob("*") if path.is_file()]
    assert len(files) == 3
    assert not [path for path in files if path.name.startswith(".tmp-")]


def test_it_previews_text_up_to_the_limit() -> None:
    # 3-byte characters: the bytes read for the preview end inside one.
    artifact = artifacts.store(content=("€" * 50).encode(), preview_chars=10)

    assert artifact.preview == "€" * 10


def test_it_previews_declared_text_that_is_not_utf8() -> None:
    artifact = artifacts.store(content=b"caf\xe9 au lait", media_type="text/plain")

    assert artifact.preview == "caf\ufffd au lait"


def test_it_keeps_no_preview_of_binary_content() -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
    zeros = b"\x00\x01\x02 looks like text"

    assert artifacts.store(content=png, media_type="image/png").preview == ""
    assert artifacts.store(content=zeros).preview == ""


def test_it_refuses_content_that_is_not_bytes() -> None:
    with pytest.raises(ValueError, match="artifact content must be bytes, not str"):
        artifacts.store(content="text")  # type: ignore[arg-type]  # the mistake under test


def test_it_refuses_a_name_over_200_characters() -> None:
    with pytest.raises(ValueError, match="artifact name is 201 characters long; the limit is 200"):
        artifacts.store(content=b"x", name="n" * 201)


def test_it_detects_a_corrupted_file() -> None:
    artifact = artifacts.store(content=b"precious")
    assert artifacts.verify(artifact)

    artifacts.path_of(artifact).write_bytes(b"preciouz")

    assert not artifacts.verify(artifact)


def test_it_repairs_a_corrupted_file_when_the_content_is_stored_again() -> None:
    artifact = artifacts.store(content=b"precious")
    artifacts.path_of(artifact).write_bytes(b"prec")

    artifacts.store(content=b"precious")

    assert artifacts.verify(artifact)


def test_it_reports_a_missing_file_as_unverified() -> None:
    artifact = artifacts.store(content=b"gone")
    artifacts.path_of(artifact).unlink()

    assert not artifacts.verify(artifact)
