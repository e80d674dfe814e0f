"""JSON-RPC 2.0 over stdio: one JSON object per line each way, answered in order.

A reader thread takes the requests; the end of stdin (the SSH connection is gone) or SIGTERM
stops the sandbox of the request in progress: an attempt whose caller went away must not keep
writing in the worktree while the control plane places the step elsewhere.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
from typing import Any, BinaryIO

from cluster.runner.handler import Handler
from cluster.runner.protocol import (
    INTERNAL,
    INVALID_REQUEST,
    PARSE_ERROR,
    RpcError,
)

MAX_LINE = 64 << 20


def serve(handler: Handler, requests: BinaryIO, answers: BinaryIO) -> None:
    hangup = threading.Event()
    lines: queue.Queue[bytes | None] = queue.Queue()

    def read() -> None:
        while line := requests.readline(MAX_LINE + 1):
            lines.put(line)
        hangup.set()
        lines.put(None)

    threading.Thread(target=read, name="runner-reader", daemon=True).start()

    def terminate(_sig: int, _frame: object) -> None:
        hangup.set()
        lines.put(None)

    signal.signal(signal.SIGTERM, terminate)
    while (line := lines.get()) is not None:
        if hangup.is_set() and not line.strip():
            continue
        answer = respond(handler, line, hangup)
        answers.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
        answers.flush()
        if hangup.is_set() and lines.empty():
            break


def respond(handler: Handler, line: bytes, stopping: threading.Event) -> dict[str, Any]:
    ident: Any = None
    try:
        if len(line) > MAX_LINE:
            raise RpcError(INVALID_REQUEST, f"request longer than {MAX_LINE} bytes")
        try:
            request = json.loads(line)
        except ValueError as error:
            raise RpcError(PARSE_ERROR, f"not JSON: {error}") from None
        if not isinstance(request, dict):
            raise RpcError(INVALID_REQUEST, "a request is a JSON object")
        ident = request.get("id")
        method = request.get("method")
        if request.get("jsonrpc") != "2.0" or not isinstance(method, str):
            raise RpcError(INVALID_REQUEST, 'a request needs "jsonrpc": "2.0" and a "method"')
        result = handler.call(method, request.get("params", {}), stopping=stopping)
    except RpcError as error:
        return {
            "jsonrpc": "2.0",
            "id": ident,
            "error": {"code": error.code, "message": error.message},
        }
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": INTERNAL, "message": message}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """stdin and a private copy of stdout for the protocol; fd 1 then points at stderr, so that
    nothing else printed (a library's warning) can corrupt the stream of answers."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, answers
