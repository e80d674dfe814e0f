"""A stop is immediate at the egress proxy: the moment the owner, a budget cap or the kill switch
asks a run tree to stop (long before a worker ends its runs), the tree's tokens open nothing and
its open tunnels are cut, within a second."""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from agentos.core import audit
from cluster import egress
from kernel import runs
from kernel.budgets import Ledger
from kernel.debits import Debit
from kernel.metering import Meter
from kernel.models import Run, RunStatus
from missions import killswitch
from tests.cluster.egress_fixtures import Upstream
from tests.cluster.test_egress import make_run
from tests.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

GOAL_SECONDS = 1.0


def child_of(root: Run) -> Run:
    """A delegated run under `root`, as the kernel records one (its ancestors named)."""
    child = make_run(hosts=[], parent=root)
    Run.objects.filter(pk=child.pk).update(ancestors=[root.pk])
    child.refresh_from_db()
    return child


def proxy_auth(token: str) -> str:
    return "Proxy-Authorization: Basic " + base64.b64encode(f"run:{token}".encode()).decode()


@contextlib.contextmanager
def tunnel(path: Path, port: int, token: str) -> Iterator[socket.socket]:
    """An open CONNECT tunnel to the upstream, idle (the upstream waits for its request)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        client.connect(str(path))
        client.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n{proxy_auth(token)}\r\n\r\n".encode())
        assert client.recv(100).startswith(b"HTTP/1.1 200")
        yield client


def get(path: Path, port: int, token: str) -> tuple[int, bytes] | None:
    """(status, body) of a GET through the run's socket; None once the socket is closed."""
    netloc = f"127.0.0.1:{port}"
    request = f"GET http://{netloc}/after HTTP/1.1\r\nHost: {netloc}\r\n{proxy_auth(token)}\r\n\r\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(5)
            client.connect(str(path))
            client.sendall(request.encode())
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
    except (FileNotFoundError, ConnectionError):  # the socket closed: refused, or gone
        return None
    if not answer:  # closed as it came in, with the socket
        return None
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def cut_within(client: socket.socket, deadline: float) -> bool:
    """Whether the proxy closes the tunnel before `deadline` (monotonic)."""
    client.settimeout(max(deadline - time.monotonic(), 0.001))
    try:
        return client.recv(100) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def stops_at_once(
    upstream: Upstream, stop: Callable[[Run], object], *, refused: tuple[int, ...] = (403,)
) -> bytes:
    """Attach a child of a fresh tree, open a tunnel, `stop` the tree; then within the goal the
    child's token opens nothing and the tunnel is cut. Returns the first refusal's body."""
    root = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    child = child_of(root)
    attached = egress.attach(run_id=child.pk, root_id=root.pk, scopes=["egress"], seconds=60)
    port, token = upstream.port, attached.token
    assert get(attached.socket, port, token) == (200, b"hello from /after\n")
    seen = len(upstream.seen)
    with tunnel(attached.socket, port, token) as client:
        asked = time.monotonic()
        stop(root)
        answer = get(attached.socket, port, token)  # at once: no cache window lets it through
        assert answer is None or answer[0] in refused, answer
        assert cut_within(client, asked + GOAL_SECONDS), "the open tunnel outlived the stop"
    assert time.monotonic() - asked < GOAL_SECONDS
    assert len(upstream.seen) == seen, "nothing after the stop reached the host"
    # The runs are only asked to stop: no worker has ended them.
    assert not Run.objects.get(pk=child.pk).is_terminal
    return answer[1] if answer else b""


def test_it_refuses_the_token_and_cuts_the_tunnel_at_the_owners_stop(
    service: egress.Service, upstream: Upstream
) -> None:
    body = stops_at_once(upstream, lambda root: runs.request_stop(root.pk, by="owner"))
    assert body == b"" or body.endswith(b": the run is stopping (cancelled)\n"), body


def test_it_refuses_the_token_and_cuts_the_tunnel_at_a_budget_cap(
    service: egress.Service, upstream: Upstream
) -> None:
    def spend_the_roots_budget(root: Run) -> None:
        # The child's debit crosses its root's cap: the meter stops the root's whole tree.
        child = Run.objects.get(parent_id=root.pk)
        crossed = Ledger(usd_micros=5, caps={"max_usd_micros": 5})
        Meter(run=child).check_debit(Debit(runs={root.pk: crossed}, account=None, day_usd_micros=0))

    body = stops_at_once(upstream, spend_the_roots_budget)
    assert body == b"" or body.endswith(b": the run is stopping (budget_exhausted)\n"), body


def test_it_refuses_the_token_and_cuts_the_tunnel_at_the_kill_switch(
    service: egress.Service, upstream: Upstream
) -> None:
    def tap() -> None:
        try:
            killswitch.engage(actor=audit.Actor())
        finally:
            connection.close()

    switch = threading.Thread(target=tap, daemon=True)

    def engage(root: Run) -> None:
        # What follows the switch's transaction (each node asked to kill its sandboxes) may take
        # a while: the goal runs from the tap, not from the switch's answer.
        switch.start()
        wait_for(
            lambda: Run.objects.filter(pk=root.pk, cancel_requested=True).exists(),
            timeout=GOAL_SECONDS,
            message="the kill switch to stop the tree",
            interval=0.01,
        )

    try:
        # Refused as stopping (403) until the key is replaced, then as revoked (407).
        stops_at_once(upstream, engage, refused=(403, 407))
    finally:
        switch.join(timeout=30)


def test_it_refuses_a_token_of_a_run_asked_to_stop_without_a_doorbell(
    service: egress.Service, upstream: Upstream
) -> None:
    """A stop flag raised without a notification (no worker holds the run): every request still
    reads it, and the reaper's poll cuts the tunnel within the goal."""
    body = stops_at_once(
        upstream,
        lambda root: Run.objects.filter(pk__in=[root.pk]).update(
            cancel_requested=True, stop_reason=RunStatus.CANCELLED
        ),
    )
    assert body == b"" or body.endswith(b": its run tree is stopping (cancelled)\n"), body
