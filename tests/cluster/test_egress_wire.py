"""The egress proxy's HTTP parsing against real sockets: every head that two parsers could read
two ways (a bare LF or CR, a folded line, a second Host, a length framed twice, a control byte)
is refused with 400 and journaled, and the host behind it sees nothing; a well-formed request,
as the clients in a sandbox send them, still goes through."""

from __future__ import annotations

import base64
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from cluster import egress
from kernel.models import Event, Run
from tests.cluster.egress_fixtures import Upstream
from tests.cluster.test_egress import make_run

pytestmark = pytest.mark.django_db(transaction=True)

SMUGGLED = "evil.example"


@dataclass(frozen=True)
class Case:
    name: str
    head: str  # the request's head with {url}, {netloc} and {auth} to fill, ending in CRLF CRLF
    body: bytes = b""
    status: int = 400


GET = "GET {url} HTTP/1.1\r\nHost: {netloc}\r\n{auth}"
POST = "POST {url} HTTP/1.1\r\nHost: {netloc}\r\n{auth}"
CONNECT = "CONNECT {netloc} HTTP/1.1\r\n{auth}"

# One per class a strict proxy refuses; each would reach the host differently than we read it.
CASES = [
    Case("bare LF adding a Host", GET + f"X-Note: a\nHost: {SMUGGLED}\r\n\r\n"),
    Case("bare LF adding a Proxy-Authorization", GET + "X-Note: a\nProxy-Authorization: x\r\n\r\n"),
    Case("bare LF line endings", "GET {url} HTTP/1.1\nHost: {netloc}\n{auth_lf}\n"),
    Case("bare CR in a header", GET + f"X-Note: a\rHost: {SMUGGLED}\r\n\r\n"),
    Case("bare CR in the request line", "GET {url}\rX HTTP/1.1\r\nHost: {netloc}\r\n{auth}\r\n"),
    Case("obsolete line folding", GET + f"X-Note: a\r\n Host: {SMUGGLED}\r\n\r\n"),
    Case("obsolete line folding with a tab", GET + "X-Note: a\r\n\tb\r\n\r\n"),
    Case("a second Host", GET + f"Host: {SMUGGLED}\r\n\r\n"),
    Case(
        "Host other than the absolute URL's",
        f"GET {{url}} HTTP/1.1\r\nHost: {SMUGGLED}\r\n{{auth}}\r\n",
    ),
    Case("CONNECT with another Host", CONNECT + f"Host: {SMUGGLED}:443\r\n\r\n"),
    Case(
        "Content-Length and Transfer-Encoding",
        POST + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"0\r\n\r\n",
    ),
    Case(
        "two different Content-Length",
        POST + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"hello!",
    ),
    Case(
        "the same Content-Length twice",
        POST + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n",
        b"hi",
    ),
    Case("a Content-Length list", POST + "Content-Length: 2, 2\r\n\r\n", b"hi"),
    Case("Transfer-Encoding gzip, chunked", POST + "Transfer-Encoding: gzip, chunked\r\n\r\n"),
    Case("NUL in a header value", GET + "X-Note: a\x00b\r\n\r\n"),
    Case("another control in a header value", GET + "X-Note: a\x1bb\r\n\r\n"),
    Case("DEL in a header name", GET + "X-No\x7fte: a\r\n\r\n"),
    Case("a space before the colon", GET + f"Host : {SMUGGLED}\r\n\r\n"),
    Case("a second Proxy-Authorization", GET + "{auth}\r\n"),
    Case("an HTTP version we do not speak", "GET {url} HTTP/1.2\r\nHost: {netloc}\r\n{auth}\r\n"),
    Case("CONNECT to an absolute URL", "CONNECT http://{netloc} HTTP/1.1\r\n{auth}\r\n"),
    Case("CONNECT with user info", "CONNECT user@{netloc} HTTP/1.1\r\n{auth}\r\n"),
    Case("CONNECT to a path", "CONNECT {netloc}/x HTTP/1.1\r\n{auth}\r\n"),
    Case("CONNECT without a port", "CONNECT 127.0.0.1 HTTP/1.1\r\n{auth}\r\n"),
    Case("an absolute URL with user info", GET.replace("{url}", "http://u@{netloc}/") + "\r\n"),
    Case("a head too large", GET + "X-Big: " + "b" * (70 * 1024) + "\r\n\r\n", status=431),
]


def ask(path: Path, request: bytes) -> tuple[int, bytes]:
    """One raw request on a run's socket; (status, body). Every refusal here is prompt: a proxy
    that waits for more (a head it cannot see the end of) fails the deadline."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        client.connect(str(path))
        client.sendall(request)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def fill(case: Case, *, port: int, token: str) -> bytes:
    netloc = f"127.0.0.1:{port}"
    basic = base64.b64encode(f"run:{token}".encode()).decode()
    auth = f"Proxy-Authorization: Basic {basic}"
    head = case.head.format(
        url=f"http://{netloc}/smuggle",
        netloc=netloc,
        auth=auth + "\r\n",
        auth_lf=auth + "\n",
    )
    return head.encode("latin-1") + case.body


def refusals(run: Run) -> list[dict[str, object]]:
    return [e.data for e in Event.objects.filter(run_id=run.pk, kind="egress.refused")]


def test_it_refuses_every_ambiguous_head_with_400_and_the_host_sees_none(
    service: egress.Service, upstream: Upstream
) -> None:
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=60)
    failed: list[str] = []
    for case in CASES:
        seen, journaled = len(upstream.seen), len(refusals(run))
        try:
            status, body = ask(
                attached.socket, fill(case, port=upstream.port, token=attached.token)
            )
        except OSError as error:  # a timeout: the proxy waited on a head it should refuse
            failed.append(f"{case.name}: {error!r}")
            continue
        if status != case.status:
            failed.append(f"{case.name}: answered {status} {body[:120]!r}")
        if len(upstream.seen) != seen:
            failed.append(f"{case.name}: reached the host with {upstream.seen[-1]}")
        if len(refusals(run)) != journaled + 1:
            failed.append(f"{case.name}: not journaled")
    assert not failed, "\n".join(failed)
    assert not [s for s in upstream.seen if SMUGGLED in str(s) or "proxy-authorization" in s]
    # The journal says why without repeating what the sandbox sent in its headers.
    kept = str(refusals(run))
    assert attached.token not in kept
    assert base64.b64encode(f"run:{attached.token}".encode()).decode() not in kept


def test_it_forwards_well_formed_requests_as_sandbox_clients_send_them(
    service: egress.Service, upstream: Upstream
) -> None:
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=60)
    port, token = upstream.port, attached.token
    well_formed = [
        # A tab and obs-text inside a value are field content; the Host may leave out port 80
        # only when the URL does (here it cannot: it names the port).
        Case("tab and obs-text", GET + "X-Note: a\tb \xe9\r\n\r\n", status=200),
        Case(
            "Host in another case",
            GET.replace("Host: {netloc}", "hOsT: {netloc}") + "\r\n",
            status=200,
        ),
        Case("HTTP/1.0 without Host", "GET {url} HTTP/1.0\r\n{auth}\r\n", status=200),
        Case("a body", POST + "Content-Length: 2\r\n\r\n", b"hi", status=200),
    ]
    for case in well_formed:
        status, body = ask(attached.socket, fill(case, port=port, token=token))
        assert (status, body) == (200, b"hello from /smuggle\n"), case.name
    assert upstream.seen[-4]["x-note"] == "a\tb \xe9"
    assert upstream.seen[-1]["body"] == "hi"
    assert upstream.seen[-1]["content-length"] == "2"
    assert "proxy-authorization" not in upstream.seen[-1]

    # CONNECT as Python's http.client sends it (urllib3, pip: no Host), and as curl does.
    basic = base64.b64encode(f"run:{token}".encode()).decode()
    for host in ("", f"Host: 127.0.0.1:{port}\r\n", "Host: 127.0.0.1\r\n"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(5)
            client.connect(str(attached.socket))
            client.sendall(
                f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n{host}"
                f"Proxy-Authorization: Basic {basic}\r\n\r\n".encode()
            )
            assert client.recv(100).startswith(b"HTTP/1.1 200"), host
            client.sendall(b"GET /tunnelled HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
        assert answer.endswith(b"hello from /tunnelled\n"), host
    assert not refusals(run)
