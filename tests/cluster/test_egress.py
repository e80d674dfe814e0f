"""The egress service against real sockets: a run's Unix socket, its token, the allow-list, the
API bridge with the vault's key, the tree's stop, the kill switch's revocation, and a restart.
A client here speaks to the run's socket as the in-sandbox forwarder would relay it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from cluster import egress, run_tokens
from cluster.identity import SandboxUnavailable, identity
from kernel.models import Event, Run, RunStatus
from missions import keys
from missions.models import Mission, Project
from tests.cluster.egress_fixtures import Upstream
from tests.polling import wait_for
from tests.providers.wire import WireServer
from tools import remotes
from tools.models import Decision, PermissionRule

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # The restart test forks a service process from this one; the child touches only its own.
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]

KEY = "sk-ant-egress-canary-" + "k" * 24
REPO_TOKEN = "glpat-egress-canary-" + "r" * 12


def make_run(*, hosts: list[str], parent: Run | None = None) -> Run:
    if parent is None:
        project = Project.objects.create(name=f"egress {time.monotonic_ns()}")
        mission = Mission.objects.create(project=project, goal="reach one host")
        run = Run.objects.create(account=mission, program="test", input={"allowed_hosts": hosts})
    else:
        run = Run.objects.create(
            account_id=parent.account_id, parent=parent, root=parent, depth=1, program="test"
        )
    Run.objects.filter(pk=run.pk).update(root=run.root_id or run.pk)
    run.refresh_from_db()
    return run


def token_of(run: Run, *scopes: str, seconds: int = 60) -> str:
    return run_tokens.mint(
        run_id=run.pk, root_id=run.root_id or run.pk, scopes=list(scopes), seconds=seconds
    )


def ask(path: Path, request: bytes) -> tuple[int, bytes]:
    """Send one raw request to a run's socket; (status, body) of the answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(path))
        client.sendall(request)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    if not answer:
        raise ConnectionResetError("closed without an answer")
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def get(path: Path, url: str, token: str | None, *, headers: str = "") -> tuple[int, bytes]:
    auth = ""
    if token is not None:
        basic = base64.b64encode(f"run:{token}".encode()).decode()
        auth = f"Proxy-Authorization: Basic {basic}\r\n"
    host = urlsplit(url).netloc  # the proxy refuses a Host other than the URL's
    return ask(path, f"GET {url} HTTP/1.1\r\nHost: {host}\r\n{auth}{headers}\r\n".encode())


def events(run: Run, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in Event.objects.filter(run_id=run.pk, kind=kind).order_by("id")]


def test_it_forwards_to_an_allowed_host_only_and_journals_every_refusal(
    service: egress.Service, upstream: Upstream, elsewhere: Upstream
) -> None:
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=60)
    assert attached.socket == egress.socket_path(run.pk)
    info = attached.socket.stat()
    assert oct(info.st_mode & 0o777) == "0o600"
    if os.geteuid() == 0:
        assert info.st_uid == identity(run.pk)[0]
    assert attached.env["http_proxy"] == attached.env["HTTP_PROXY"]
    assert attached.token in attached.env["http_proxy"]

    status, body = get(attached.socket, f"http://127.0.0.1:{upstream.port}/ok", attached.token)
    assert (status, body) == (200, b"hello from /ok\n")
    # The proxy hop's headers never reach the host: the token stays between sandbox and proxy.
    assert "proxy-authorization" not in upstream.seen[-1]

    status, body = get(attached.socket, f"http://127.0.0.1:{elsewhere.port}/", attached.token)
    assert status == 403
    assert b"is not allowed: not on the run's allow-list" in body
    assert not elsewhere.seen
    tunnel = f"CONNECT 127.0.0.1:{elsewhere.port} HTTP/1.1\r\nHost: 127.0.0.1:{elsewhere.port}\r\n"
    basic = base64.b64encode(f"run:{attached.token}".encode()).decode()
    status, _ = ask(attached.socket, f"{tunnel}Proxy-Authorization: Basic {basic}\r\n\r\n".encode())
    assert status == 403
    refused = events(run, "egress.refused")
    assert [(e["method"], e["port"]) for e in refused] == [
        ("GET", elsewhere.port),
        ("CONNECT", elsewhere.port),
    ]
    assert events(run, "egress.allowed")[0]["port"] == upstream.port
    # The journal never holds the token, even from a request that carried it.
    assert attached.token not in str(list(Event.objects.filter(run_id=run.pk).values("data")))

    # CONNECT to an allowed host: a tunnel, the client's bytes both ways.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(attached.socket))
        client.sendall(
            f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1\r\n"
            f"Proxy-Authorization: Basic {basic}\r\n\r\n".encode()
        )
        assert client.recv(100).startswith(b"HTTP/1.1 200")
        client.sendall(b"GET /tunnelled HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    assert answer.endswith(b"hello from /tunnelled\n")
    refuses_bad_tokens(upstream)
    follows_the_owners_rules(upstream)
    attaches_only_what_a_run_needs()


def attaches_only_what_a_run_needs() -> None:
    """No socket for a run with nothing on its allow-list; scopes as its task names them."""
    quiet = make_run(hosts=[])
    assert egress.attach_for_run(quiet.pk, seconds=30) is None
    assert not egress.socket_path(quiet.pk).exists()
    busy = make_run(hosts=["pypi.org:443"])
    Run.objects.filter(pk=busy.pk).update(input={"allowed_hosts": ["x"], "bridges": ["git", "?"]})
    attached = egress.attach_for_run(busy.pk, seconds=30)
    assert attached is not None
    claims = run_tokens.verify(attached.token, run_id=busy.pk, scope="bridge:git")
    assert claims.scopes == ("bridge:git", "egress")
    assert claims.expires_at - time.time() == pytest.approx(90, abs=5)


def refuses_bad_tokens(upstream: Upstream) -> None:
    run = make_run(hosts=["127.0.0.1"])
    other = make_run(hosts=["127.0.0.1"])
    path = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=60).socket
    url = f"http://127.0.0.1:{upstream.port}/"
    seen_before = len(upstream.seen)
    good = token_of(run, "egress")
    head, claims, signature = good.split(".")
    forged_claims = base64.urlsafe_b64encode(
        base64.urlsafe_b64decode(claims + "==").replace(b'"exp":', b'"exp":9')
    )
    cases = {
        None: (407, b"no run token"),
        "garbage": (407, b"not a run token"),
        f"{head}.{forged_claims.decode().rstrip('=')}.{signature}": (407, b"does not match"),
        token_of(other, "egress"): (403, f"belongs to run {other.pk}".encode()),
        token_of(run, "bridge:anthropic"): (403, b"lacks the scope 'egress'"),
    }
    for token, (status, reason) in cases.items():
        answer = get(path, url, token)
        assert answer[0] == status, (token, answer)
        assert reason in answer[1], (token, answer)
    expired = token_of(run, "egress", seconds=1)
    time.sleep(1.05)  # the clock must pass the token's expiry (whole seconds)
    status, body = get(path, url, expired)
    assert (status, b"expired" in body) == (407, True)
    assert len(events(run, "egress.refused")) == len(cases) + 1
    assert len(upstream.seen) == seen_before, "nothing refused reached the host"


def test_it_refuses_a_stopped_tree_then_closes_the_socket(
    service: egress.Service, upstream: Upstream
) -> None:
    root = make_run(hosts=["127.0.0.1"])
    child = make_run(hosts=[], parent=root)
    attached = egress.attach(run_id=child.pk, root_id=root.pk, scopes=["egress"], seconds=60)
    url = f"http://127.0.0.1:{upstream.port}/child"
    assert get(attached.socket, url, attached.token)[0] == 200  # the root's task allows it
    Run.objects.filter(pk=root.pk).update(status=RunStatus.CANCELLED)

    def closed() -> bool:
        with contextlib.suppress(OSError):  # refused as stopped until the reaper closes it
            status, body = get(attached.socket, url, attached.token)
            if status == 403:
                assert b"run tree has stopped (cancelled)" in body
        return not attached.socket.exists()

    wait_for(closed, timeout=5, message="the reaper to close a stopped tree's socket")
    with pytest.raises(SandboxUnavailable, match="run tree has stopped"):
        egress.attach(run_id=child.pk, root_id=root.pk, scopes=["egress"], seconds=60)
    kill_switch_revokes_every_token(upstream)


def test_it_bridges_with_the_vaults_key_and_drops_the_sandboxs_own(
    service: egress.Service,
    provider: WireServer,
    upstream: Upstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.providers.wire import Json

    monkeypatch.setitem(settings.EGRESS_BRIDGE_URLS, "anthropic", provider.url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    run = make_run(hosts=[])
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["bridge:anthropic"], seconds=60)
    url = "http://anthropic.bridge/v1/messages"
    status, body = get(attached.socket, url, attached.token)
    assert status == 503
    assert b"no anthropic key is set" in body

    keys.put("anthropic", KEY)
    provider.queue(Json({"ok": True}))
    body_out = b'{"model": "m"}'
    request = (
        f"POST {url} HTTP/1.1\r\nHost: anthropic.bridge\r\nx-api-key: sandbox-made-up\r\n"
        f"Authorization: Bearer sandbox-made-up\r\nContent-Length: {len(body_out)}\r\n"
        f"Proxy-Authorization: Bearer {attached.token}\r\n\r\n"
    ).encode() + body_out
    status, body = ask(attached.socket, request)
    assert status == 200, body
    received = provider.received[-1]
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == KEY
    assert "authorization" not in {k.lower() for k in received.headers}
    assert received.body == {"model": "m"}
    assert events(run, "egress.bridged")[0]["host"] == "anthropic.bridge"
    # A direct request to the provider is no bridge: the allow-list refuses it.
    assert get(attached.socket, f"{provider.url}/v1/messages", attached.token)[0] == 403

    # git.bridge: the project's origin with its token, the path under the clone URL's.
    mission = Mission.objects.get(pk=run.account_id)
    Project.objects.filter(pk=mission.project_id).update(
        clone_url=f"http://127.0.0.1:{upstream.port}/team/repo.git"
    )
    remotes.put(project_id=mission.project_id, remote="origin", kind="token", secret=REPO_TOKEN)
    url = "http://git.bridge/info/refs?service=git-upload-pack"
    assert b"lacks the scope 'bridge:git'" in get(attached.socket, url, attached.token)[1]
    git_token = token_of(run, "bridge:git")
    assert get(attached.socket, url, git_token)[0] == 200
    seen = upstream.seen[-1]
    assert seen["path"] == "/team/repo.git/info/refs?service=git-upload-pack"
    expected = base64.b64encode(f"x-access-token:{REPO_TOKEN}".encode()).decode()
    assert seen["authorization"] == f"Basic {expected}"


def follows_the_owners_rules(upstream: Upstream) -> None:
    run = make_run(hosts=["127.0.0.1"])
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=60)
    url = f"http://127.0.0.1:{upstream.port}/"
    assert get(attached.socket, url, attached.token)[0] == 200
    rule = PermissionRule.objects.create(tool="egress", pattern="127.0.0.*", decision=Decision.ASK)
    status, body = get(attached.socket, url, attached.token)
    assert (status, b"asks the owner" in body) == (403, True)
    PermissionRule.objects.filter(pk=rule.pk).update(decision=Decision.DENY)
    assert b"denied by rule" in get(attached.socket, url, attached.token)[1]


def kill_switch_revokes_every_token(upstream: Upstream) -> None:
    from agentos.core import audit
    from missions import killswitch

    run = make_run(hosts=["127.0.0.1"])
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=60)
    url = f"http://127.0.0.1:{upstream.port}/"
    assert get(attached.socket, url, attached.token)[0] == 200
    killswitch.engage(actor=audit.Actor())
    # The switch asked the run's tree to stop: its socket closes at once (test_egress_stop).
    wait_for(
        lambda: not attached.socket.exists(),
        timeout=1,
        message="the kill switch to close the run's socket",
    )
    # The token itself is dead: on the socket of a run started after the switch, the token is
    # judged first, and what answers is the revocation.
    later = make_run(hosts=["127.0.0.1"])
    path = egress.attach(run_id=later.pk, root_id=later.pk, scopes=["egress"], seconds=60).socket
    status, body = get(path, url, attached.token)
    assert (status, body) == (
        407,
        b"run token revoked (every token was revoked by the kill switch)\n",
    )


def test_it_binds_the_sockets_again_after_a_kill(egress_dir: Path, upstream: Upstream) -> None:
    """A service process killed with SIGKILL (forked from this one: a second Django start would
    cost seconds) leaves its sockets dead; the next one serves them again."""
    run = make_run(hosts=["127.0.0.1"])
    root = egress_dir.parent / "killed"

    def start() -> int:
        (root / egress.CONTROL).unlink(missing_ok=True)
        pid = os.fork()
        if pid == 0:  # the child: only the service, on database connections of its own threads
            try:
                asyncio.run(egress.Service(root).serve())
            finally:
                os._exit(0)
        wait_for(
            lambda: (root / egress.CONTROL).exists(),
            timeout=10,
            message="the egress service to start",
        )
        return pid

    first = start()
    try:
        os.environ["AGENTOS_EGRESS_DIR"] = str(root)
        attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=60)
    finally:
        os.environ["AGENTOS_EGRESS_DIR"] = str(egress_dir)
        os.kill(first, signal.SIGKILL)
        os.waitpid(first, 0)
    url = f"http://127.0.0.1:{upstream.port}/again"
    with pytest.raises(ConnectionRefusedError):
        get(attached.socket, url, attached.token)
    second = start()
    try:
        assert get(attached.socket, url, attached.token) == (200, b"hello from /again\n")
    finally:
        os.kill(second, signal.SIGTERM)
        os.kill(second, signal.SIGKILL)
        os.waitpid(second, 0)
