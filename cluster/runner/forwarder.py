"""The in-sandbox end of egress: 127.0.0.1:3128 inside the sandbox → the run's egress Unix socket
(bound at /run/agentos/egress.sock), byte for byte. The sandbox has no other network (its own
network namespace holds only loopback); clients find it through `http_proxy`, which also carries
the run's token, and the control plane's egress service judges every request.

Standard library only, one file: the sandbox runs it from a read-only copy,

    python3 /run/agentos/forwarder.py [--listen 127.0.0.1:3128] [--socket /run/agentos/egress.sock]
        && exec "$@"

It binds the port, then leaves a relay behind (a daemon in the sandbox's process tree, killed with
it) and exits 0: the command starts only once the port answers. It exits 1 with the reason when it
cannot bind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys

LISTEN = "127.0.0.1:3128"
SOCKET = "/run/agentos/egress.sock"
CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _relay(path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(path)
    except OSError as error:
        body = f"the egress socket does not answer ({error})\n".encode()
        writer.write(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()
        return
    try:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        up_writer.close()
        writer.close()


async def _serve(listener: socket.socket, path: str) -> None:
    server = await asyncio.start_server(lambda r, w: _relay(path, r, w), sock=listener, limit=CHUNK)
    async with server:
        await server.serve_forever()


def _bind(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen(128)
    return listener


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default=LISTEN, help="host:port to listen on")
    parser.add_argument("--socket", default=SOCKET, help="the egress Unix socket")
    parser.add_argument("--foreground", action="store_true", help="relay here, do not detach")
    args = parser.parse_args(argv)
    try:
        # Loopback is down in a fresh network namespace until someone brings it up; bwrap does.
        listener = _bind(args.listen)
    except (OSError, ValueError) as error:
        print(f"forwarder: cannot listen on {args.listen}: {error}", file=sys.stderr)
        return 1
    if not args.foreground:
        if os.fork():
            return 0  # the port is bound: connections queue until the relay accepts them
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)  # the command's output pipe must not wait for the relay
        os.close(null)
    asyncio.run(_serve(listener, args.socket))
    return 0


if __name__ == "__main__":
    sys.exit(main())
