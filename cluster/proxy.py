"""The HTTP proxy's wire for the egress service (`cluster.egress`): a request head read, parsed
by h11 and checked, the answers it refuses with, the request it sends upstream (serialized by
h11), and the byte pipes of a tunnel or a forwarded response. One request per connection: every
answer says `Connection: close`, so the response is piped as it comes and never parsed here.

The sandbox is hostile, and the host behind the proxy parses the request again: a head two
parsers could read two ways is refused with 400 before anything is judged. h11 checks the
grammar (request line, field names and values, one Host, agreeing Content-Lengths, chunked as
the only Transfer-Encoding); it tolerates, for leniency, what is checked here first: a bare LF
(h11 ends a line there), a bare CR, obsolete line folding (h11 joins the lines), a control
character inside a value, Content-Length beside Transfer-Encoding (h11 lets chunked win),
repeated or listed Content-Lengths (h11 merges equal ones), a second Proxy-Authorization, and a
Host other than the target.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

from cluster import run_tokens

HEAD_LIMIT = 64 * 1024  # a request head's bytes, its lines included
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
# CONNECT's target (authority-form) and a Host header: a host, then a port (optional in Host).
AUTHORITY = re.compile(
    r"(?P<host>[A-Za-z0-9._-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::(?P<port>[0-9]{1,5}))?"
)
TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a field name (RFC 9110 5.1)
CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # in a value: every control but the tab
# Headers a request has at most once: a second one is read differently by different parsers.
SINGLE = (b"host", b"content-length", b"transfer-encoding", b"proxy-authorization")


class Refused(Exception):
    """A request answered with `status` and the message, and journaled. `head` is what was read
    of a request refused before it could be parsed (its first line is journaled)."""

    def __init__(self, status: int, message: str, *, head: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.head = head


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
    usd_micros: int = 0  # what the bridged call costs the run

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"


async def read_head(reader: asyncio.StreamReader) -> bytes:
    """A request's head, line by line up to its empty line. Every line ends with CRLF and holds
    no other CR or LF: refused (400) at the first that does not, without waiting for the rest;
    431 past `HEAD_LIMIT` (the reader's limit bounds one line). `IncompleteReadError` when the
    client leaves first."""
    head = bytearray()
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise Refused(431, "request head too large", head=bytes(head)) from None
        head += line
        if len(head) > HEAD_LIMIT:
            raise Refused(431, "request head too large", head=bytes(head))
        if not line.endswith(b"\r\n") or b"\r" in line[:-2]:
            raise Refused(400, "a bare CR or LF in the request head", head=bytes(head))
        if line == b"\r\n":
            if len(head) == 2:
                raise Refused(400, "an empty line before the request line", head=bytes(head))
            return bytes(head)


def parse(head: bytes) -> Request:
    """The request `read_head` read: checked line by line, then parsed by h11."""
    first, *fields = head[:-4].split(b"\r\n")
    counts: dict[bytes, int] = {}
    for line in fields:
        if line[:1] in (b" ", b"\t"):
            raise Refused(
                400, "obsolete line folding (a header line starting with white space)", head=head
            )
        name, colon, value = line.partition(b":")
        if not colon or not TOKEN.fullmatch(name):
            raise Refused(400, "a header line without a valid field name", head=head)
        if CONTROL.search(value):
            raise Refused(400, f"a control character in the {_name(name)} header", head=head)
        key = name.lower()
        counts[key] = counts.get(key, 0) + 1
        if key == b"content-length" and not value.strip(b" \t").isdigit():
            raise Refused(400, "Content-Length is not a single number", head=head)
        if key == b"transfer-encoding" and value.strip(b" \t").lower() != b"chunked":
            raise Refused(400, "a Transfer-Encoding other than chunked", head=head)
    for key in SINGLE:
        if counts.get(key, 0) > 1:
            raise Refused(400, f"more than one {_name(key)} header", head=head)
    if b"content-length" in counts and b"transfer-encoding" in counts:
        raise Refused(400, "both Content-Length and Transfer-Encoding", head=head)
    if first.startswith(b"CONNECT ") and b"host" not in counts:
        # HTTP/1.1 asks a Host of every request, h11 too; Python's http.client (urllib3, pip)
        # sends CONNECT without one. Its target stands in; it is checked as any Host would be.
        authority = first.split(b" ")[1] if first.count(b" ") == 2 else b""
        head = head[:-2] + b"Host: " + authority + b"\r\n\r\n"
    server = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
    server.receive_data(head)
    try:
        event = server.next_event()
    except h11.RemoteProtocolError as error:
        # h11's message may quote the line it refused (a credential): only its first words.
        raise Refused(400, f"malformed request: {_first_words(error)}", head=head) from None
    if not isinstance(event, h11.Request):
        raise Refused(400, "malformed request", head=head)
    if event.http_version not in (b"1.0", b"1.1"):
        raise Refused(400, f"unsupported HTTP version {event.http_version!r}", head=head)
    method, target = event.method.decode("ascii"), event.target.decode("ascii")
    if not method.isalpha():
        raise Refused(400, f"unsupported method {method[:20]!r}", head=head)
    headers = [(k.decode("ascii"), v.decode("latin-1")) for k, v in event.headers.raw_items()]
    if method == "CONNECT":
        match = AUTHORITY.fullmatch(target)
        if match is None or match["port"] is None:
            raise Refused(400, f"CONNECT needs host:port, not {target[:100]!r}", head=head)
        request = Request(method, host_of(match["host"]), port_of(match["port"]), "", headers)
        _check_host(request, head, default_port=request.port)
        return request
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise Refused(
            400,
            "only proxy requests are served here: CONNECT host:port, or an absolute http:// URL"
            " (use http://<service>.bridge/... for a provider's API)",
            head=head,
        )
    if "@" in parts.netloc:
        raise Refused(400, "a URL with user info (user@host) is refused", head=head)
    try:
        port = parts.port or 80
    except ValueError:
        raise Refused(400, f"bad port in {target[:100]!r}", head=head) from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    request = Request(method, host_of(parts.hostname), port, path, headers)
    _check_host(request, head, default_port=80)
    return request


def _check_host(request: Request, head: bytes, *, default_port: int) -> None:
    """The Host header, when there is one, names the target: a proxy reads the target, the host
    behind it may read the Host."""
    given = next((v for k, v in request.headers if k.lower() == "host"), None)
    if given is None:
        return
    match = AUTHORITY.fullmatch(given)
    port = int(match["port"]) if match and match["port"] else default_port
    if match is None or (match["host"].lower().strip("[]"), port) != (request.host, request.port):
        raise Refused(
            400,
            f"the Host header {given[:100]!r} is not the target {request.host}:{request.port}",
            head=head,
        )


def _name(name: bytes) -> str:
    return name.decode("ascii").title()


def upstream_request(
    method: str, path: str, headers: list[tuple[str, str]]
) -> tuple[h11.Connection, bytes]:
    """The head of the request sent upstream, serialized by h11 (which refuses a header it could
    not write unambiguously: a bridge's credential with a line break, say), and the connection
    that serializes its body (`upstream_body`)."""
    client = h11.Connection(h11.CLIENT)
    fields = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    try:
        head = client.send(h11.Request(method=method, target=path, headers=fields))
    except (h11.LocalProtocolError, UnicodeEncodeError) as error:
        # Its message may quote the header (a credential): only its first words.
        raise Refused(502, f"cannot send this request upstream: {_first_words(error)}") from None
    return client, head or b""


def upstream_body(client: h11.Connection, body: bytes) -> bytes:
    """`body` framed as the head announced it (h11 checks it is all of it)."""
    data = client.send(h11.Data(data=body)) or b"" if body else b""
    return data + (client.send(h11.EndOfMessage()) or b"")


def _first_words(error: Exception) -> str:
    return str(error).split(":")[0].split(" b'")[0]


def host_of(host: str) -> str:
    if not HOST.fullmatch(host):
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
    raise run_tokens.TokenRefused(
        "no run token: send Proxy-Authorization (the http_proxy URL has it)"
    )


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
