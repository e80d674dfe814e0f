"""The runner protocol's errors and its one structured parameter, the `profile` of a sandbox.

The control plane builds a profile (`cluster.sandbox`); the node trusts nothing in it: every field
is checked here, and a bad one is refused with -32602 naming the field. docs/cluster.md describes
the whole protocol.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROTOCOL = 1

INVALID_PARAMS = -32602
INTERNAL = -32603
METHOD_NOT_FOUND = -32601
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
STALE_FENCE = -32010
UNAVAILABLE = -32011

# Step ids and environment names become file names under the state directory.
STEP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_ARGV_BYTES = 1 << 20
MAX_STDIN_BYTES = 64 << 20


class RpcError(Exception):
    """An answer of the form {"error": {code, message}}."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, message)


def unavailable(message: str) -> RpcError:
    return RpcError(UNAVAILABLE, message)


@dataclass(frozen=True)
class Limits:
    wall_seconds: float
    memory_bytes: int
    processes: int
    file_bytes: int
    cpu_seconds: int
    output_bytes: int
    disk_bytes: int
    # Optional in the wire format (the defaults are `cluster.sandbox.Limits`'s).
    cpus: float | None = 1.0
    tmp_bytes: int = 512 << 20
    address_space_bytes: int | None = None


@dataclass(frozen=True)
class Service:
    """A process a warm VM keeps running between its commands (a run's browser): started as the
    command's uid with its drops before the first command that names it, spared by the kill at
    each command's end (not by a stop's), gone with the VM (`cluster.runner.vmguest`)."""

    argv: list[str]
    cpu_seconds: int  # over its whole life, not a command's


@dataclass(frozen=True)
class Profile:
    level: int
    argv: list[str]
    workdir: Path | None
    writable: bool  # the worktree's own .git writable (a git tool's step); the worktree always is
    uid: int
    gid: int
    user: str
    limits: Limits
    seccomp: bytes
    env: dict[str, str]
    stdin: bytes
    stderr_apart: bool
    egress_socket: Path | None
    environment: tuple[str, str] | None  # (name, version)
    # Level 2: the key of the warm VM this command runs in (its run's), booted by the first
    # command of that key and kept for the next (`cluster.runner.vmpool`); None: a VM of its own.
    warm: str | None = None
    # Level 2, warm only: the service this command talks to (ignored by a one-shot VM).
    service: Service | None = None


REQUIRED_LIMITS = (
    "wall_seconds",
    "memory_bytes",
    "processes",
    "file_bytes",
    "cpu_seconds",
    "output_bytes",
    "disk_bytes",
)
# Sandbox variables the profile's env may not set: the sandbox sets them itself.
RESERVED_ENV = frozenset({"PATH", "HOME", "LANG"})


def parse_profile(value: Any, field: str = "profile") -> Profile:
    """The profile, every field checked; `RpcError(-32602)` naming the first bad one."""
    raw = _object(value, field)
    level = raw.get("level")
    if type(level) is not int or level not in (1, 2, 3):
        raise invalid(f"{field}.level must be 1, 2 or 3, not {level!r}")
    argv = _argv(raw.get("argv"), field)
    workdir = raw.get("workdir")
    if workdir is not None and (not isinstance(workdir, str) or not workdir.startswith("/")):
        raise invalid(f"{field}.workdir must be an absolute path or null, not {workdir!r}")
    writable = raw.get("writable", False)
    if not isinstance(writable, bool):
        raise invalid(f"{field}.writable must be a boolean")
    uid, gid = (_integer(raw.get(key), f"{field}.{key}", 0, 2**32 - 3) for key in ("uid", "gid"))
    user = raw.get("user")
    if not isinstance(user, str) or not NAME.match(user):
        raise invalid(f"{field}.user must be a user name ([A-Za-z0-9_.-], 1 to 64), not {user!r}")
    limits = _limits(raw.get("limits"), f"{field}.limits")
    seccomp = _base64(raw.get("seccomp"), f"{field}.seccomp", allow_null=level != 1)
    if level == 1 and not seccomp:
        raise invalid(f"{field}.seccomp is required at level 1 (base64 of the BPF program)")
    env = raw.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(key, str) and isinstance(val, str) for key, val in env.items()
    ):
        raise invalid(f"{field}.env must be an object of strings")
    for key in env:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key) or key in RESERVED_ENV:
            raise invalid(f"{field}.env: {key!r} cannot be set (a reserved or invalid name)")
    stdin = _base64(raw.get("stdin"), f"{field}.stdin", allow_null=True)
    if len(stdin) > MAX_STDIN_BYTES:
        raise invalid(f"{field}.stdin is longer than {MAX_STDIN_BYTES} bytes")
    stderr_apart = raw.get("stderr_apart", False)
    if not isinstance(stderr_apart, bool):
        raise invalid(f"{field}.stderr_apart must be a boolean")
    egress = raw.get("egress_socket")
    if egress is not None and (not isinstance(egress, str) or not egress.startswith("/")):
        raise invalid(f"{field}.egress_socket must be an absolute path or null")
    return Profile(
        level=level,
        argv=argv,
        workdir=Path(workdir) if workdir is not None else None,
        writable=writable,
        uid=uid,
        gid=gid,
        user=user,
        limits=limits,
        seccomp=seccomp,
        env=dict(env),
        stdin=stdin,
        stderr_apart=stderr_apart,
        egress_socket=Path(egress) if egress is not None else None,
        environment=_environment(raw.get("environment"), f"{field}.environment"),
        warm=_warm(raw.get("warm"), f"{field}.warm"),
        service=_service(raw.get("service"), f"{field}.service"),
    )


def _argv(argv: Any, field: str) -> list[str]:
    if (
        not isinstance(argv, list)
        or not argv
        or not all(isinstance(arg, str) and "\0" not in arg for arg in argv)
    ):
        raise invalid(f"{field}.argv must be a non-empty list of strings without NUL")
    if sum(len(arg.encode()) for arg in argv) > MAX_ARGV_BYTES:
        raise invalid(f"{field}.argv is longer than {MAX_ARGV_BYTES} bytes")
    return list(argv)


def _service(value: Any, field: str) -> Service | None:
    if value is None:
        return None
    raw = _object(value, field)
    argv = _argv(raw.get("argv"), field)
    cpu_seconds = _integer(raw.get("cpu_seconds"), f"{field}.cpu_seconds", 1, 86_400)
    return Service(argv=argv, cpu_seconds=cpu_seconds)


def _warm(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not NAME.match(value):
        raise invalid(f"{field} must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}} or be null")
    return value


def _object(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"{field} must be an object")
    return value


def _integer(value: Any, field: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise invalid(f"{field} must be an integer from {low} to {high}, not {value!r}")
    return value


def _number(value: Any, field: str) -> float:
    if type(value) not in (int, float) or not 0 < value < 10**9:
        raise invalid(f"{field} must be a positive number, not {value!r}")
    return float(value)


def _base64(value: Any, field: str, *, allow_null: bool) -> bytes:
    if value is None and allow_null:
        return b""
    if not isinstance(value, str):
        raise invalid(f"{field} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as error:
        raise invalid(f"{field} is not valid base64: {error}") from None


def _limits(value: Any, field: str) -> Limits:
    raw = _object(value, field)
    missing = [key for key in REQUIRED_LIMITS if key not in raw]
    if missing:
        raise invalid(f"{field} lacks {', '.join(missing)}")
    big = 2**62
    cpus = raw.get("cpus", 1.0)
    address_space = raw.get("address_space_bytes")
    return Limits(
        wall_seconds=_number(raw["wall_seconds"], f"{field}.wall_seconds"),
        memory_bytes=_integer(raw["memory_bytes"], f"{field}.memory_bytes", 1 << 20, big),
        processes=_integer(raw["processes"], f"{field}.processes", 1, 1 << 22),
        file_bytes=_integer(raw["file_bytes"], f"{field}.file_bytes", 0, big),
        cpu_seconds=_integer(raw["cpu_seconds"], f"{field}.cpu_seconds", 1, big),
        output_bytes=_integer(raw["output_bytes"], f"{field}.output_bytes", 0, 1 << 30),
        disk_bytes=_integer(raw["disk_bytes"], f"{field}.disk_bytes", 0, big),
        cpus=None if cpus is None else _number(cpus, f"{field}.cpus"),
        tmp_bytes=_integer(raw.get("tmp_bytes", 512 << 20), f"{field}.tmp_bytes", 1 << 20, big),
        address_space_bytes=None
        if address_space is None
        else _integer(address_space, f"{field}.address_space_bytes", 1 << 20, big),
    )


def _environment(value: Any, field: str) -> tuple[str, str] | None:
    if value is None:
        return None
    raw = _object(value, field)
    name, version = raw.get("name"), raw.get("version")
    for key, part in (("name", name), ("version", version)):
        if not isinstance(part, str) or not NAME.match(part):
            raise invalid(f"{field}.{key} must match [A-Za-z0-9][A-Za-z0-9_.-]*, not {part!r}")
    return str(name), str(version)


def step_id(value: Any, field: str = "step_id") -> str:
    if not isinstance(value, str) or not STEP_ID.match(value):
        raise invalid(f"{field} must match [A-Za-z0-9][A-Za-z0-9_.:-]{{0,127}}, not {value!r}")
    return value


def text(value: Any, field: str, *, limit: int = 1024) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise invalid(f"{field} must be a non-empty string of at most {limit} characters")
    return value


def fence(value: Any, field: str = "fence") -> int:
    return _integer(value, field, 0, 2**63 - 1)
