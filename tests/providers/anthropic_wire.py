"""Messages-API streaming payloads (SSE events shaped as in the public streaming reference)."""

from __future__ import annotations

from typing import Any

SSE = tuple[str, dict[str, Any]]
PING: SSE = ("ping", {"type": "ping"})
SIGNATURE = "EqQBCkYIAxgCIkB0ZXN0LXNpZ25hdHVyZS1ieXRlcy0wMTIzNDU2Nzg5+/=="


# --- SSE payloads ---------------------------------------------------------------------------------


def message_start(*, input_tokens: int = 12, cache_read: int = 0, cache_write: int = 0) -> SSE:
    message: dict[str, Any] = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
            "output_tokens": 1,
        },
    }
    return ("message_start", {"type": "message_start", "message": message})


def block(index: int, start: dict[str, Any], *deltas: dict[str, Any]) -> list[SSE]:
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        ),
        *(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def text(index: int, *chunks: str) -> list[SSE]:
    deltas = ({"type": "text_delta", "text": chunk} for chunk in chunks)
    return block(index, {"type": "text", "text": ""}, *deltas)


def tool_use(index: int, call_id: str, name: str, *chunks: str) -> list[SSE]:
    deltas = ({"type": "input_json_delta", "partial_json": chunk} for chunk in chunks)
    return block(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}}, *deltas)


def thinking(index: int, *chunks: str, signature: str = SIGNATURE) -> list[SSE]:
    deltas = [{"type": "thinking_delta", "thinking": chunk} for chunk in chunks]
    deltas.append({"type": "signature_delta", "signature": signature})
    return block(index, {"type": "thinking", "thinking": "", "signature": ""}, *deltas)


def reply(
    *blocks: list[SSE],
    stop_reason: str = "end_turn",
    output_tokens: int = 20,
    start: SSE | None = None,
    context_management: dict[str, Any] | None = None,
) -> list[SSE]:
    end = {"stop_reason": stop_reason, "stop_sequence": None}
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": end,
        "usage": {"output_tokens": output_tokens},
    }
    if context_management is not None:  # what context editing did (a beta field)
        delta["context_management"] = context_management
    return [
        start or message_start(),
        PING,
        *(event for events in blocks for event in events),
        ("message_delta", delta),
        ("message_stop", {"type": "message_stop"}),
    ]


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
