"""Streamable-HTTP MCP servers, reached only through a run's egress socket (`cluster.outbound`):
the run's allow-list decides the host, a bridge adds the server's credentials (our code never
holds them), and every request is an event on the run's journal.

The SDK speaks httpx2; the egress client is httpx's: `_Through` carries each request across,
streaming both ways (the server's answers may be an event stream).

Listing a server before any run uses it (registration, approval) runs as a short kernel run of
its own (`LISTING`, on an account of its own): its requests are decided, journaled and revoked
like any run's. It needs a worker, as every run does."""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import mcp_types
from mcp.client.streamable_http import streamable_http_client

from cluster import outbound
from kernel import runs
from kernel.context import RunContext
from kernel.models import Account, Effect, Run, RunStatus, StepKind
from kernel.programs import Outcome
from kernel.steps import Done
from tools.mcp import sessions
from tools.mcp.transport import ServerLog

LISTING = "mcp_listing"
LISTING_SECONDS = 60.0


def endpoint(url: str, bridge: str) -> str:
    """Where requests go: the server's URL, or through its bridge (`http://<bridge>.bridge` with
    the URL's path and query: the bridge's own base URL names the host)."""
    if not bridge:
        return url
    parts = urllib.parse.urlsplit(url)
    query = f"?{parts.query}" if parts.query else ""
    return f"http://{bridge}.bridge{parts.path or '/'}{query}"


def reach(url: str, bridge: str) -> dict[str, list[str]]:
    """What a run needs in its input for the egress service to let it reach the server."""
    if bridge:
        return {"bridges": [bridge]}
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {"allowed_hosts": [f"{parts.hostname}:{port}"]}


def opener(url: str, bridge: str, run_id: int) -> sessions.Opener:
    """A session's transport through `run_id`'s egress; the client is made here, in the caller's
    thread (it mints the run's token in the database)."""
    try:
        client = outbound.async_client(run_id, seconds=sessions.MAX_AGE_SECONDS)
    except outbound.Unavailable as error:
        raise sessions.SessionError(f"the run cannot reach out: {error}") from None
    target = endpoint(url, bridge)

    @contextlib.asynccontextmanager
    async def open_(log: ServerLog) -> AsyncIterator[Any]:
        async with (
            client,
            httpx2.AsyncClient(
                transport=_Through(client), timeout=httpx2.Timeout(30.0, read=300.0)
            ) as carried,
            streamable_http_client(target, http_client=carried) as streams,
        ):
            yield streams

    return open_


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.response.aiter_raw():
            yield chunk

    async def aclose(self) -> None:
        await self.response.aclose()


class _Through(httpx2.AsyncBaseTransport):
    """httpx2's transport over an httpx client (the run's egress): the request as sent, the
    response streamed back as it comes."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        headers = [(key, value) for key, value in request.headers.raw]
        sent = self.client.build_request(
            request.method, str(request.url), headers=headers, content=body
        )
        try:
            answer = await self.client.send(sent, stream=True)
        except httpx.TimeoutException as error:
            raise httpx2.ReadTimeout(str(error), request=request) from None
        except httpx.HTTPError as error:
            raise httpx2.ConnectError(str(error), request=request) from None
        return httpx2.Response(
            answer.status_code,
            headers=answer.headers.raw,
            stream=_Body(answer),
            request=request,
        )


# --- Listing before any run ---------------------------------------------------------------------


def list_through_run(url: str, bridge: str) -> sessions.Listing:
    """List the server in a kernel run of its own, waited for here (a worker executes it)."""
    run = runs.start_run(
        account=Account.objects.create(),
        program=LISTING,
        input={"url": url, "bridge": bridge, **reach(url, bridge)},
    )
    deadline = time.monotonic() + LISTING_SECONDS
    while time.monotonic() < deadline:
        status, output = Run.objects.values_list("status", "output").get(pk=run.pk)
        if status in (RunStatus.DONE, RunStatus.FAILED):
            break
        time.sleep(0.1)
    else:
        runs.request_stop(run.pk, by="mcp listing")
        raise sessions.SessionError(
            f"no worker listed the server within {LISTING_SECONDS:g} s (is a worker running?)"
        )
    if status != RunStatus.DONE or not isinstance(output, dict) or "error" in output:
        why = output.get("error") if isinstance(output, dict) else None
        raise sessions.SessionError(str(why or f"the listing run ended {status}"))
    return sessions.Listing(
        [mcp_types.Tool.model_validate(tool) for tool in output["tools"]],
        str(output["version"]),
    )


def listing_program(ctx: RunContext) -> Outcome:
    """The listing as one journaled read step; a failure is its output, for the owner."""
    url, bridge = str(ctx.input["url"]), str(ctx.input.get("bridge", ""))

    def execute(call: Any) -> Done:
        try:
            listing = sessions.POOL.list_now(opener(url, bridge, ctx.run_id))
        except sessions.SessionError as error:
            return Done({"error": str(error)})
        return Done(
            {
                "version": listing.version,
                "tools": [tool.model_dump(mode="json", by_alias=True) for tool in listing.tools],
            }
        )

    result = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.READ,
        name=LISTING,
        request={"url": url, "bridge": bridge},
        execute=execute,
    )
    return Outcome(RunStatus.DONE, result)
