"""Responses-API streaming payloads (events shaped as in the public streaming reference)."""

from __future__ import annotations

import copy
from typing import Any

from tests.providers.wire import Stream

MODEL = "gpt-5.2"


class Responses:
    """One Responses API stream, built in order, numbered as the server numbers it."""

    def __init__(self, response_id: str = "resp_1") -> None:
        self.id = response_id
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.emit("response.created", response=self.response("in_progress", []))
        self.emit("response.in_progress", response=self.response("in_progress", []))

    def emit(self, event: str, /, **data: Any) -> None:
        self.events.append((event, {"type": event, **data, "sequence_number": self.sequence}))
        self.sequence += 1

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        incomplete: str | None = None,
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": 1767225600,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": "You are terse.",
            "max_output_tokens": 8192,
            "max_tool_calls": None,
            "model": MODEL,
            "output": copy.deepcopy(output),
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": "medium", "summary": "auto"},
            "service_tier": "default",
            "store": False,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": {},
        }

    def reasoning(self, item_id: str, encrypted: str, *summary: str) -> Responses:
        index = len(self.output)
        item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": []}
        self.emit("response.output_item.added", output_index=index, item=item)
        part = {"type": "summary_text", "text": ""}
        common = {"item_id": item_id, "output_index": index, "summary_index": 0}
        self.emit("response.reasoning_summary_part.added", **common, part=part)
        for chunk in summary:
            self.emit("response.reasoning_summary_text.delta", **common, delta=chunk)
        text = "".join(summary)
        self.emit("response.reasoning_summary_text.done", **common, text=text)
        part = {"type": "summary_text", "text": text}
        self.emit("response.reasoning_summary_part.done", **common, part=part)
        item = {**item, "summary": [part], "encrypted_content": encrypted}
        self.emit("response.output_item.done", output_index=index, item=item)
        self.output.append(item)
        return self

    def message(self, item_id: str, *chunks: str, refusal: str | None = None) -> Responses:
        index = len(self.output)
        item: dict[str, Any] = {
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
        }
        self.emit("response.output_item.added", output_index=index, item={**item, "content": []})
        common = {"item_id": item_id, "output_index": index, "content_index": 0}
        if refusal is not None:
            part: dict[str, Any] = {"type": "refusal", "refusal": refusal}
            self.emit("response.content_part.added", **common, part={**part, "refusal": ""})
            self.emit("response.refusal.delta", **common, delta=refusal)
            self.emit("response.refusal.done", **common, refusal=refusal)
        else:
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            self.emit("response.content_part.added", **common, part=part)
            for chunk in chunks:
                self.emit("response.output_text.delta", **common, delta=chunk, logprobs=[])
            text = "".join(chunks)
            self.emit("response.output_text.done", **common, text=text, logprobs=[])
            part = {**part, "text": text}
        self.emit("response.content_part.done", **common, part=part)
        item = {**item, "status": "completed", "content": [part]}
        self.emit("response.output_item.done", output_index=index, item=item)
        self.output.append(item)
        return self

    def function_call(self, item_id: str, call_id: str, name: str, *chunks: str) -> Responses:
        index = len(self.output)
        item: dict[str, Any] = {
            "id": item_id,
            "type": "function_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": name,
            "arguments": "",
        }
        self.emit("response.output_item.added", output_index=index, item=item)
        for chunk in chunks:
            self.emit(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=chunk,
            )
        arguments = "".join(chunks)
        self.emit(
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=index,
            name=name,
            arguments=arguments,
        )
        item = {**item, "status": "completed", "arguments": arguments}
        self.emit("response.output_item.done", output_index=index, item=item)
        self.output.append(item)
        return self

    def completed(
        self, input_tokens: int = 30, output_tokens: int = 12, cached_tokens: int = 0
    ) -> Stream:
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
        self.emit("response.completed", response=self.response("completed", self.output, usage))
        return Stream(events=self.events)

    def incomplete(self, reason: str) -> Stream:
        response = self.response("incomplete", self.output, incomplete=reason)
        self.emit("response.incomplete", response=response)
        return Stream(events=self.events)
