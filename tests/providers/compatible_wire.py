"""Chat Completions streaming payloads, as llama.cpp, vLLM and Ollama send them: bare `data:`
chunks of `chat.completion.chunk` objects, then `data: [DONE]`."""

from __future__ import annotations

from typing import Any

from tests.providers.wire import Stream

MODEL = "qwen2.5-coder:7b"


class Chat:
    """One streamed chat completion, built chunk by chunk."""

    def __init__(self, completion_id: str = "chatcmpl-1") -> None:
        self.id = completion_id
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.delta(role="assistant", content="")

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> Chat:
        self.events.append(
            (
                "",
                {
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": 1767225600,
                    "model": MODEL,
                    "system_fingerprint": "b4567",
                    "choices": choices,
                    **extra,
                },
            )
        )
        return self

    def delta(self, finish_reason: str | None = None, **delta: Any) -> Chat:
        return self.chunk([{"index": 0, "delta": delta, "finish_reason": finish_reason}])

    def text(self, *chunks: str) -> Chat:
        for chunk in chunks:
            self.delta(content=chunk)
        return self

    def reasoning(self, *chunks: str) -> Chat:
        for chunk in chunks:
            self.delta(reasoning_content=chunk)
        return self

    def tool_call(self, index: int, call_id: str, name: str, *chunks: str) -> Chat:
        """The first delta names the call; the arguments follow in pieces, with its index only."""
        self.delta(
            tool_calls=[
                {
                    "index": index,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
            ]
        )
        for chunk in chunks:
            self.delta(tool_calls=[{"index": index, "function": {"arguments": chunk}}])
        return self

    def finish(
        self,
        reason: str = "stop",
        *,
        usage: dict[str, Any] | None = None,
        prompt_tokens: int = 30,
        completion_tokens: int = 12,
    ) -> Stream:
        """The finish chunk, then (as `include_usage` asks) a usage chunk with no choices."""
        self.delta(finish_reason=reason)
        self.chunk(
            [],
            usage=usage
            or {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        )
        return Stream(events=self.events, done=True)

    def finish_without_usage(self, reason: str = "stop") -> Stream:
        self.delta(finish_reason=reason)
        return Stream(events=self.events, done=True)
