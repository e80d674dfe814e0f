"""Durable files of the node's state directory: written whole or not at all, and locks between the
runner processes of one node (each SSH connection is a process of its own)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """tmp + fsync + rename + fsync of the directory: after a crash the file is the old one or
    the new one, never a torn one. Not `durable`: whole but maybe lost in a crash of the machine
    (which also ends whatever the file describes), for half the cost."""
    temp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            if durable:
                os.fsync(file.fileno())
        temp.replace(path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def write_json(path: Path, value: Any, *, durable: bool = True) -> None:
    write_atomic(path, json.dumps(value, sort_keys=True).encode(), durable=durable)


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it does not exist."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (created): released by the kernel if the holder dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), which tells a pid reused apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def alive(pid: Any, started: Any) -> bool:
    return isinstance(pid, int) and pid > 0 and start_time(pid) == started
