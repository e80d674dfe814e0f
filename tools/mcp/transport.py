"""The SDK's transports, as we open them: a stdio server started inside a level-1 sandbox
(`cluster.long_lived`), and a streamable-HTTP server reached through the run's egress proxy.

Our own stdio transport instead of the SDK's `stdio_client`: the sandbox's command line needs
descriptors passed to it (bwrap's memfds and read-only binds) and a drop to the sandbox uid, which
`stdio_client` does not offer. The message framing is the SDK's (newline-delimited JSON-RPC)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import mcp_types
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from django.conf import settings
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from cluster import long_lived

MAX_LINE = 8 << 20  # a message longer than this is refused: the server is misbehaving
STDERR_KEPT = 4000  # the tail of the server's stderr, for the owner when it fails


def runtime() -> tuple[Path, ...]:
    """What a server needs inside the sandbox: our own Python environment (its packages and
    console scripts) and the interpreter it was made from, each read-only at its own path so the
    scripts' shebangs resolve; and the owner's server directories (`MCP_SERVER_DIRS`)."""
    prefix = Path(sys.prefix).resolve()
    base = Path(sys.base_prefix).resolve()
    extra = [Path(directory).resolve() for directory in settings.MCP_SERVER_DIRS]
    return tuple(dict.fromkeys([prefix, base, *extra]))


def resolve(command: list[str]) -> list[str]:
    """The argv with its program found on our environment's bin directory first (where the
    registry's servers are installed), then the system's; absolute paths as given."""
    program = command[0]
    if "/" not in program:
        for directory in (Path(sys.prefix) / "bin", Path("/usr/local/bin"), Path("/usr/bin")):
            candidate = directory / program
            if candidate.is_file() and os.access(candidate, os.X_OK):
                # Not resolved further: a venv's `python` is a symlink whose name matters.
                program = str(directory.resolve() / program)
                break
    return [program, *command[1:]]


class ServerLog:
    """The tail of a server's stderr, kept for its error message."""

    def __init__(self) -> None:
        self.tail = ""

    def add(self, text: str) -> None:
        self.tail = (self.tail + text)[-STDERR_KEPT:]


@contextlib.asynccontextmanager
async def sandboxed_stdio(
    spawn: long_lived.Spawn, log: ServerLog
) -> AsyncIterator[TransportStreams]:
    """Start `spawn` and exchange JSON-RPC lines with it; on leaving, close its stdin, give it a
    moment, then kill its process group (bwrap's --die-with-parent takes the sandbox with it)."""
    try:
        process = await anyio.open_process(
            spawn.argv,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},  # nothing of ours reaches bwrap
            cwd="/",
            start_new_session=True,
            pass_fds=spawn.fds,
        )
    finally:
        spawn.close()
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
    if stdin is None or stdout is None or stderr is None:
        raise OSError("the server's pipes were not opened")
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reading() -> None:
        buffer = ""
        async with read_writer:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for chunk in TextReceiveStream(stdout, errors="replace"):
                    lines = (buffer + chunk).split("\n")
                    buffer = lines.pop()
                    if len(buffer) > MAX_LINE:
                        await read_writer.send(ValueError("the server sent an oversized message"))
                        return
                    for line in lines:
                        if line.strip():
                            await read_writer.send(_parse(line))

    async def writing() -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with write_reader:
                async for message in write_reader:
                    body = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((body + "\n").encode())

    async def logging() -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async for chunk in TextReceiveStream(stderr, errors="replace"):
                log.add(chunk)

    async with anyio.create_task_group() as group:
        group.start_soon(reading)
        group.start_soon(writing)
        group.start_soon(logging)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
            group.cancel_scope.cancel()


def _parse(line: str) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as error:
        return error


async def _stop(process: Process) -> None:
    """Close stdin (the spec's polite ending), wait a little, then kill the whole group."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(1):
        while process.returncode is None:
            await anyio.sleep(0.02)
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with anyio.move_on_after(2):
            await process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await stream.aclose()
