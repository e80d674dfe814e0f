"""Content-addressed artifact files under `DATA_DIR/artifacts/ab/cdef…` (the sha256 in hex).

The file is written before its row, and only ever appears complete under its final name: a row
never points at a missing or partial file, while a file without a row (a rolled-back store) is
harmless and reused by the next store of the same content.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

from agentos.core.scrubber import scrub_value
from kernel.models import Artifact, Run

NAME_MAX = Artifact._meta.get_field("name").max_length or 200
MEDIA_TYPE_MAX = Artifact._meta.get_field("media_type").max_length or 100


def store(
    *,
    content: bytes,
    name: str = "",
    media_type: str = "application/octet-stream",
    run: Run | None = None,
    preview_chars: int = 2000,
) -> Artifact:
    """Write `content` once and return its row; storing identical content again returns the
    existing row unchanged (its first name, media type and run are kept)."""
    if not isinstance(content, bytes):
        raise ValueError(f"artifact content must be bytes, not {type(content).__name__}")
    if len(name) > NAME_MAX:
        raise ValueError(f"artifact name is {len(name)} characters long; the limit is {NAME_MAX}")
    if len(media_type) > MEDIA_TYPE_MAX:
        raise ValueError(
            f"media type is {len(media_type)} characters long; the limit is {MEDIA_TYPE_MAX}"
        )
    if preview_chars < 0:
        raise ValueError(f"preview_chars must be >= 0, not {preview_chars}")
    content = _scrubbed(content)
    sha256 = hashlib.sha256(content).hexdigest()
    path = _path(sha256)
    # Rewriting a file whose bytes no longer match repairs on-disk corruption (see `verify`).
    if not (path.exists() and _digest(path) == sha256):
        _write_atomically(path, content)
    # get_or_create is race-safe: it catches the IntegrityError of a concurrent insert of the
    # same sha256 and returns the winner's row.
    artifact, _ = Artifact.objects.get_or_create(
        sha256=sha256,
        defaults={
            "size": len(content),
            "media_type": media_type,
            "preview": scrub_value(_preview(content, media_type=media_type, chars=preview_chars)),
            "run": run,
            "name": name,
        },
    )
    return artifact


def path_of(artifact: Artifact) -> Path:
    return _path(artifact.sha256)


def open_artifact(artifact: Artifact) -> BinaryIO:
    return path_of(artifact).open("rb")


def verify(artifact: Artifact) -> bool:
    """Whether the file still holds the content its hash names (False when missing)."""
    path = path_of(artifact)
    return path.exists() and _digest(path) == artifact.sha256


def _path(sha256: str) -> Path:
    return Path(settings.DATA_DIR) / "artifacts" / sha256[:2] / sha256[2:]


def _digest(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _write_atomically(path: Path, content: bytes) -> None:
    # The temporary file lives in the target folder so the rename stays on one file system,
    # where os.replace is atomic: readers see the old state or the whole file, never a part.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    # Sync the folder too, or a power cut may forget the rename of an already synced file.
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _scrubbed(content: bytes) -> bytes:
    """Text content with its secrets replaced before it is hashed and kept (an artifact is read
    back by models and the owner). Binary content is kept as it is: only its preview is text."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return content
    clean = scrub_value(text)
    return content if clean is text else clean.encode("utf-8")


def _preview(content: bytes, *, media_type: str, chars: int) -> str:
    declared_text = media_type.startswith("text/") or media_type == "application/json"
    # At most 4 bytes per character; the incremental decoder tolerates a character cut in two
    # at the end of that prefix but still refuses invalid UTF-8.
    prefix = content[: chars * 4]
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(prefix, final=False)
    except UnicodeDecodeError:
        if not declared_text:
            return ""
        text = prefix.decode("utf-8", errors="replace")
    # NUL is valid UTF-8 but marks binary data, and PostgreSQL text columns refuse it.
    if "\x00" in text:
        if not declared_text:
            return ""
        text = text.replace("\x00", "")
    return text[:chars]
