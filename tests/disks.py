"""Real full disks for tests (root only): a tiny tmpfs mounted for the test, filled to the last
byte, unmounted on the way out."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@contextlib.contextmanager
def tiny_disk(path: Path, *, size: str = "256k", options: str = "") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (with mount `options`, e.g. its owner), unmounted on
    the way out."""
    path.mkdir(parents=True, exist_ok=True)
    mount_options = f"size={size}" + (f",{options}" if options else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", mount_options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(disk: Path) -> Path:
    """Write to `disk` until not one more byte fits; return the file that filled it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="No space left on device") as full:
        (disk / "probe").write_bytes(b"x" * 4096)
    assert full.value.errno == errno.ENOSPC
    return filler
