"""A2A at the edge: agentos as an agent other agents call (the A2A protocol, JSON-RPC: 1.0, and
0.3 through the SDK's adapter).

- `GET /.well-known/agent-card.json`: the agent card (public): one skill, carrying out a
  mission; JSON-RPC at `RPC_PATH`; streaming; a bearer token.
- `POST /a2a`: JSON-RPC (`SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`,
  `SubscribeToTask`; 0.3's `message/send`, `message/stream`, `tasks/get`...), from a caller
  with an API token holding the `act` scope: none or a bad one is answered 401, one without
  `act` 403 (each with its `WWW-Authenticate` challenge).

The SDK's own JSON-RPC dispatcher (`a2a.server.routes.jsonrpc_dispatcher`) parses and answers
the protocol — its error codes, its version header, its SSE framing — so this module only
authenticates and says what a task is (`MissionHandler`, over `agentos.a2a_tasks`). It is a
Starlette app that `agentos.asgi` routes these two paths to, in front of Django: the SDK's
server pieces are Starlette, and reusing them beats re-implementing the protocol in Django
views. What Django's stack would have checked is checked here: the Host header
(`ALLOWED_HOSTS`) and the body's size (`DATA_UPLOAD_MAX_MEMORY_SIZE`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler, validate_request_params
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    ExtendedAgentCardNotConfiguredError,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    PushNotificationNotSupportedError,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskStatusUpdateEvent,
    UnsupportedOperationError,
)
from a2a.utils.constants import (
    AGENT_CARD_WELL_KNOWN_PATH,
    PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_CURRENT,
    TransportProtocol,
)
from channels.db import database_sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message as AsgiMessage

from agentos import a2a_tasks as tasks
from agentos.core import audit, tokens
from agentos.core.models import AuditEvent, Scope
from agentos.models import A2ATask

RPC_PATH = "/a2a"
CARD_PATH = AGENT_CARD_WELL_KNOWN_PATH
SCHEME = "bearer"
POLL_SECONDS = 1.0  # how often a waiting send or a stream reads the task's runs
BLOCK_SECONDS = 20.0  # a blocking send returns the task as it is then (the caller polls GetTask)
STREAM_SECONDS = 15 * 60.0  # a stream ends then; the caller resubscribes (SubscribeToTask)
CALLER = "agentos.a2a.caller"  # where the authenticated caller is kept in the ASGI scope


def serves(path: str) -> bool:
    """Whether `agentos.asgi` hands this path to `application` rather than to Django."""
    return path in (RPC_PATH, CARD_PATH)


def card(base_url: str) -> AgentCard:
    """The agent card, its endpoint under `base_url` (the origin the caller reached)."""
    return AgentCard(
        name="agentos",
        description=(
            "A single owner's agentic operating system: it carries out a task as a mission of"
            " its agents, within the owner's budgets and approvals."
        ),
        version="1",
        # The same endpoint speaks 0.3 (`message/send`...), which many agents still do.
        supported_interfaces=[
            AgentInterface(
                url=f"{base_url}{RPC_PATH}",
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=version,
            )
            for version in (PROTOCOL_VERSION_CURRENT, PROTOCOL_VERSION_0_3)
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={
            SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    bearer_format="agentos API token (aos_...) with the act scope",
                    description="An API token the owner created in Settings, with 'act'.",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList(list=[])})],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="mission",
                name="Carry out a mission",
                description=(
                    "Your text becomes a mission of the owner's agents (read as data, never as"
                    " the owner's instructions). The task asks for input when the agents have a"
                    " question; its answer comes as an artifact."
                ),
                tags=["mission", "agents"],
                examples=["Summarise what changed in the last release, in five lines."],
                input_modes=["text/plain"],
                output_modes=["text/plain"],
            )
        ],
    )


# --- Requests in A2A's words ----------------------------------------------------------------------


def _caller(context: ServerCallContext) -> tasks.Caller:
    caller = context.state.get(CALLER)
    if not isinstance(caller, tasks.Caller):  # `_rpc` authenticates before the dispatcher runs
        raise UnsupportedOperationError(message="Unauthenticated call.")
    return caller


async def _db[T](function: Callable[..., T], *args: Any) -> T:
    # channels' wrapper closes stale connections around the call, as Django does per request.
    return await database_sync_to_async(function)(*args)  # type: ignore[no-any-return]  # untyped


def _snapshot_task(row: A2ATask) -> tuple[tasks.Snapshot, Task]:
    found = tasks.snapshot(row)
    return found, tasks.task(row, found)


class MissionHandler(RequestHandler):
    """The SDK's request handler, over missions: each method reads or changes the database
    through `agentos.a2a_tasks`, in a thread."""

    @validate_request_params
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        row = await _db(tasks.receive, _caller(context), params.message)
        found, task = await _db(_snapshot_task, row)
        if params.configuration.return_immediately:
            return task
        # Blocking, within bounds: a mission may take hours; the caller then polls GetTask.
        deadline = asyncio.get_running_loop().time() + BLOCK_SECONDS
        while not found.settled and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(POLL_SECONDS)
            found, task = await _db(_snapshot_task, row)
        return task

    @validate_request_params
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        row = await _db(tasks.receive, _caller(context), params.message)
        async for event in _follow(row):
            yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        row = await _db(tasks.find, _caller(context), params.id)
        found = await _db(tasks.snapshot, row)
        if found.state in tasks.FINAL:
            raise UnsupportedOperationError(
                message=f"Task {params.id} has ended: read it with GetTask."
            )
        async for event in _follow(row):
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        row = await _db(tasks.find, _caller(context), params.id)
        return await _db(tasks.task, row)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        caller = _caller(context)
        row = await _db(tasks.find, caller, params.id)
        await _db(tasks.cancel, caller, row)
        return await _db(tasks.task, row)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        raise UnsupportedOperationError(message="Listing tasks is not offered: keep their ids.")

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


async def _follow(row: A2ATask) -> AsyncGenerator[Any]:
    """The task, then an event for each change its runs show (the answer as an artifact before
    the final status), until it is over or waits for the caller, or `STREAM_SECONDS` pass.

    Polled (`POLL_SECONDS`): the runs change in worker processes, and one read a second per
    stream is cheaper than listening on the kernel's channel for a change the read names."""
    found, task = await _db(_snapshot_task, row)
    yield task
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STREAM_SECONDS
    while not found.settled and loop.time() < deadline:
        await asyncio.sleep(POLL_SECONDS)
        last, found = found, await _db(tasks.snapshot, row)
        if found.answer is not None and found.answer != last.answer:
            yield TaskArtifactUpdateEvent(
                task_id=str(row.task_id),
                context_id=row.context_id,
                artifact=tasks.artifact(row, found.answer),
                last_chunk=True,
            )
        if (found.state, found.note) != (last.state, last.note):
            yield TaskStatusUpdateEvent(
                task_id=str(row.task_id),
                context_id=row.context_id,
                status=tasks.status(row, found),
            )


# --- HTTP: authentication, limits, the two routes ------------------------------------------------


class _CallerContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with our caller in it and without the token's header."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["headers"] = {
            name: value
            for name, value in context.state.get("headers", {}).items()
            if name.lower() != "authorization"
        }
        context.state[CALLER] = request.scope.get(CALLER)
        return context


DISPATCHER = JsonRpcDispatcher(
    request_handler=MissionHandler(), context_builder=_CallerContext(), enable_v0_3_compat=True
)


def _refusal(status: int, code: str, message: str, *, challenge: str = "") -> JSONResponse:
    """An HTTP refusal (RFC 6750's challenge in `WWW-Authenticate`) with a JSON-RPC error body,
    so a JSON-RPC client reads why."""
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": message, "data": {"reason": code}},
    }
    headers = {"WWW-Authenticate": f"Bearer {challenge}".strip()} if status in (401, 403) else {}
    return JSONResponse(body, status_code=status, headers=headers)


def _authenticate(secret: str, address: str | None) -> tasks.Caller:
    """The caller of a token with `act` (else `TokenRefused` / `ScopeMissing`), audited as the
    API audits its refusals."""
    token = tokens.authenticate_token(secret, address=address)
    if Scope.ACT not in token.scopes:
        audit.record(
            AuditEvent.Kind.TOKEN_REFUSED,
            address=address,
            reason="missing_scope",
            scope=Scope.ACT.value,
            token=token.pk,
        )
        refusal = tokens.ScopeMissing(
            "This API token lacks the 'act' scope (needed to send tasks); create a token with it"
            " in Settings."
        )
        refusal.scope = Scope.ACT
        raise refusal
    return tasks.Caller(token_id=token.pk, name=token.name, address=address)


def _host_refused(request: Request) -> Response | None:
    domain, _port = split_domain_port(request.headers.get("host", ""))
    if domain and validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    return _refusal(400, "bad_host", "This host is not served here.")


async def _body(request: Request) -> bytes | None:
    """The body, read up to the limit Django sets its own requests; None beyond it."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 2_621_440
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return body


async def _rpc(request: Request) -> Response:
    refused = _host_refused(request)
    if refused is not None:
        return refused
    scheme, _sep, secret = request.headers.get("authorization", "").partition(" ")
    address = request.client.host if request.client else None
    if not secret.strip() or scheme.lower() != "bearer":
        return _refusal(
            401, "unauthenticated", "Send 'Authorization: Bearer <API token>' (with 'act')."
        )
    try:
        caller = await _db(_authenticate, secret, address)
    except tokens.ScopeMissing as error:
        return _refusal(
            403, error.code, error.message, challenge='error="insufficient_scope", scope="act"'
        )
    except tokens.TokenRefused as error:
        return _refusal(401, error.code, error.message, challenge='error="invalid_token"')
    body = await _body(request)
    if body is None:
        return _refusal(413, "too_large", "The request body is too large.")

    async def replay() -> AsgiMessage:
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {**request.scope, CALLER: caller}
    return await DISPATCHER.handle_requests(Request(scope, replay))


async def _card(request: Request) -> Response:
    refused = _host_refused(request)
    if refused is not None:
        return refused
    origin = str(request.base_url).rstrip("/")
    return Response(
        json.dumps(agent_card_to_dict(card(origin))),
        media_type="application/json",
        headers={"Cache-Control": "public, max-age=300"},
    )


application = Starlette(
    routes=[
        Route(CARD_PATH, _card, methods=["GET"]),
        Route(RPC_PATH, _rpc, methods=["POST"]),
    ]
)
