"""HTTP from the control plane on a run's behalf (a fetched page, a remote MCP server, another
agent), through that run's egress socket like its sandboxes' requests: the same allow-list
decides every host, bridges add credentials our code never holds, and every request is an event
on the run's journal (`cluster.egress`). Nothing here goes out any other way.

    with outbound.client(run_id, seconds=60) as http:
        http.get("https://example.org/")              # the run's policy decides
        http.post("http://search.bridge/api", ...)    # the bridge `search` adds its key
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import httpcore
import httpx

from cluster import egress, run_tokens
from cluster.identity import SandboxUnavailable
from kernel.models import Run

# The proxy's address as clients name it: requests reach the run's socket, whatever the host.
PROXY_URL = "http://egress.invalid"


class Unavailable(Exception):
    """The run cannot reach anything now: the egress service does not answer, or the run is no
    more (stopped, unknown). The message says which."""


def client(
    run_id: int,
    *,
    seconds: float,
    scopes: list[str] | None = None,
    follow_redirects: bool = False,
) -> httpx.Client:
    """An HTTP client whose every request goes through `run_id`'s egress socket with a token
    valid `seconds` (plus a margin for the last response). `scopes`: the token's scopes, by
    default what the run's policy says it needs, and at least `egress`."""
    socket, token = _attach(run_id, seconds, scopes)
    return httpx.Client(
        transport=_Through(socket, token),
        timeout=httpx.Timeout(seconds, connect=egress.CONNECT_SECONDS),
        follow_redirects=follow_redirects,
        trust_env=False,  # our own environment's proxies and certificates play no part
    )


def async_client(
    run_id: int,
    *,
    seconds: float,
    scopes: list[str] | None = None,
    follow_redirects: bool = False,
) -> httpx.AsyncClient:
    """`client`, for asyncio code (an SDK that speaks httpx's async client). Call it from a
    thread that may use the database (it mints the token), not from inside the event loop."""
    socket, token = _attach(run_id, seconds, scopes)
    return httpx.AsyncClient(
        transport=_AsyncThrough(socket, token),
        timeout=httpx.Timeout(seconds, connect=egress.CONNECT_SECONDS),
        follow_redirects=follow_redirects,
        trust_env=False,
    )


def _attach(run_id: int, seconds: float, scopes: list[str] | None) -> tuple[Path, str]:
    root_id = Run.objects.filter(pk=run_id).values_list("root_id", flat=True).first()
    if root_id is None and not Run.objects.filter(pk=run_id).exists():
        raise Unavailable(f"no run {run_id}")
    if scopes is None:
        policies = egress.EGRESS_POLICY.values()
        scopes = policies[0].needs(run_id) if len(policies) == 1 else []
        scopes = ["egress", *(scope for scope in scopes if scope != "egress")]
    # Said of every request: the control plane's own, judged by the harness before the call.
    scopes = [*scopes, run_tokens.OUTBOUND]
    lifetime = min(int(seconds) + 60, run_tokens.MAX_SECONDS)
    try:
        attached = egress.attach(
            run_id=run_id, root_id=root_id or run_id, scopes=scopes, seconds=lifetime
        )
    except SandboxUnavailable as error:
        raise Unavailable(str(error)) from None
    return attached.socket, attached.token


class _Through(httpx.HTTPTransport):
    """httpx's transport through the proxy at the run's Unix socket: https in a CONNECT tunnel
    (TLS end to end), http as an absolute URI the service forwards or bridges."""

    def __init__(self, socket: Path, token: str) -> None:
        super().__init__()
        self._pool = httpcore.HTTPProxy(
            proxy_url=PROXY_URL,
            proxy_headers={"Proxy-Authorization": f"Bearer {token}"},
            network_backend=_ToSocket(socket),
        )


class _ToSocket(httpcore.SyncBackend):
    """Every connection httpcore opens is to the proxy, so every one is to the run's socket
    (httpcore's proxy pools take no `uds`)."""

    def __init__(self, socket: Path) -> None:
        self.socket = str(socket)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        return self.connect_unix_socket(self.socket, timeout, socket_options)


class _AsyncThrough(httpx.AsyncHTTPTransport):
    def __init__(self, socket: Path, token: str) -> None:
        super().__init__()
        self._pool = httpcore.AsyncHTTPProxy(
            proxy_url=PROXY_URL,
            proxy_headers={"Proxy-Authorization": f"Bearer {token}"},
            network_backend=_AsyncToSocket(socket),
        )


class _AsyncToSocket(httpcore.AnyIOBackend):
    def __init__(self, socket: Path) -> None:
        self.socket = str(socket)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self.connect_unix_socket(self.socket, timeout, socket_options)
