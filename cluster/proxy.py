"""The HTTP proxy's wire for the egress service (`cluster.egress`): a request head parsed and
checked, the answers it refuses with, and the byte pipes of a tunnel or a forwarded response. One
request per connection: every answer says `Connection: close`."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from cluster import tokens

# Headers that speak to the proxy hop, or that a client could set to pass as someone else upstream.
HOP = frozenset(
    {
        "proxy-authorization",
        "proxy-connection",
        "proxy-authenticate",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "host",
    }
)
HOST = re.compile(r"^[A-Za-z0-9._-]{1,253}$|^\[[0-9A-Fa-f:.]{2,45}\]$")


class Refused(Exception):
    """A request answered with `status` and the message; journaled unless `journal` is off."""

    def __init__(self, status: int, message: str, *, journal: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.journal = journal


@dataclass(frozen=True)
class Request:
    method: str
    host: str
    port: int
    path: str  # origin-form ("/x?y"); "" for CONNECT
    headers: list[tuple[str, str]]


@dataclass(frozen=True)
class Destination:
    host: str
    port: int
    tls: bool
    path: str
    headers: dict[str, str]
    bridge: str  # the bridge's name, "" when direct

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"


def parse(head: bytes) -> Request:
    try:
        text = head.decode("latin-1")
        first, *rest = text[:-4].split("\r\n")
        method, target, version = first.split(" ")
    except ValueError:
        raise Refused(400, "malformed request line", journal=False) from None
    if not version.startswith("HTTP/1.") or not method.isalpha():
        raise Refused(400, f"unsupported request line {first[:100]!r}", journal=False)
    headers = []
    for line in rest:
        key, sep, value = line.partition(":")
        if not sep or not key or key != key.strip():
            raise Refused(400, f"malformed header line {line[:100]!r}", journal=False)
        headers.append((key, value.strip()))
    if method == "CONNECT":
        host, sep, port_text = target.rpartition(":")
        if not sep or not port_text.isdigit():
            raise Refused(400, f"CONNECT needs host:port, not {target[:100]!r}")
        return Request(method, host_of(host), port_of(port_text), "", headers)
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise Refused(
            400,
            "only proxy requests are served here: CONNECT host:port, or an absolute http:// URL"
            " (use http://<service>.bridge/... for a provider's API)",
        )
    try:
        port = parts.port or 80
    except ValueError:
        raise Refused(400, f"bad port in {target[:100]!r}") from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Request(method, host_of(parts.hostname), port, path, headers)


def host_of(host: str) -> str:
    if not HOST.match(host):
        raise Refused(400, f"malformed host {host[:100]!r}")
    return host.lower().strip("[]")


def port_of(text: str) -> int:
    port = int(text)
    if not 0 < port < 65536:
        raise Refused(400, f"port {port} out of range")
    return port


def token_of(headers: list[tuple[str, str]]) -> str:
    for key, value in headers:
        if key.lower() != "proxy-authorization":
            continue
        kind, _, credential = value.partition(" ")
        if kind.lower() == "bearer":
            return credential.strip()
        if kind.lower() == "basic":
            try:
                decoded = base64.b64decode(credential.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                break
            return decoded.partition(":")[2]
    raise tokens.TokenRefused("no run token: send Proxy-Authorization (the http_proxy URL has it)")


async def answer(
    writer: asyncio.StreamWriter, status: int, message: str, extra: dict[str, str] | None = None
) -> None:
    reasons = {
        400: "Bad Request",
        403: "Forbidden",
        404: "Not Found",
        407: "Proxy Authentication Required",
        411: "Length Required",
        413: "Payload Too Large",
        431: "Request Header Fields Too Large",
        502: "Bad Gateway",
        503: "Service Unavailable",
    }
    body = (message + "\n").encode()
    head = [f"HTTP/1.1 {status} {reasons.get(status, 'Refused')}", "Content-Type: text/plain"]
    head += [f"{k}: {v}" for k, v in (extra or {}).items()]
    head += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    writer.write("\r\n".join(head).encode() + body)
    with contextlib.suppress(OSError):
        await writer.drain()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()
    if writer.can_write_eof():
        with contextlib.suppress(OSError):
            writer.write_eof()


async def pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    try:
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
    finally:
        up_writer.close()
