"""Responses API output: the model's text (through its reasoning / tool-call splitter) as output items --
`reasoning` (a reasoning model's thinking), `message` (output_text) and `function_call` -- built whole or
as the stream events the OpenAI SDKs expect, in their order:

    response.created, response.in_progress,
    per item: response.output_item.added, [response.content_part.added,
              response.output_text.delta... | response.reasoning_text.delta...,
              response.output_text.done | response.reasoning_text.done, response.content_part.done]
              | [response.function_call_arguments.delta, response.function_call_arguments.done],
              response.output_item.done,
    response.completed | response.incomplete (max_output_tokens) | response.failed

every event carrying `type` and a `sequence_number` counting from 0."""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable

from orcd.server.reasoning import CONTENT, Splitter
from orcd.server.sse import sse_event
from orcd.server.tool_scanners import CALL_ARGS, CALL_BEGIN
from orcd.tokenizer.harmony import REASONING, TOOL_CALL

# engine finish reason -> (response status, terminal event)
ENDINGS = {"eos": ("completed", "response.completed"), "stop": ("completed", "response.completed"),
           "length": ("incomplete", "response.incomplete"), "cancelled": ("failed", "response.failed"),
           "error": ("failed", "response.failed")}


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


class EventWriter:
    """SSE frames of Responses events: `event: TYPE`, data with the type and the next sequence number."""

    def __init__(self) -> None:
        self.seq = 0

    def frame(self, name: str, data: dict) -> bytes:
        body = {"type": name, "sequence_number": self.seq, **data}
        self.seq += 1
        return sse_event(body, name)


class OutputBuilder:
    """Text increments -> output items; `on_event(name, data)` gets each stream event as it happens (the
    data is serialized at once by the caller, so items may change afterwards). `parallel=False` keeps only
    the first function call (parallel_tool_calls=false)."""

    def __init__(self, split: Callable[[], Splitter] | None, parallel: bool = True,
                 on_event: Callable[[str, dict], None] | None = None):
        self.splitter = split() if split is not None else None
        self.parallel, self.on_event = parallel, on_event
        self.items: list[dict] = []
        self.reasoning_tokens = 0  # increments (engine events: one token each) whose text was reasoning
        self._open = False
        self._streaming: dict | None = None  # the function_call item whose arguments stream ({} : skipped)

    def push(self, text: str, final: bool = False) -> None:
        if self.splitter is None:
            pairs = [(CONTENT, text)]
        else:
            pairs = self.splitter.push(text) + (self.splitter.flush() if final else [])
        self.reasoning_tokens += any(kind == REASONING for kind, _ in pairs)
        for kind, piece in pairs:
            if kind in (CALL_BEGIN, CALL_ARGS) or (kind == TOOL_CALL and self._streaming is not None):
                self._streamed_call(kind, piece)
            elif kind == TOOL_CALL:
                self._call(piece)
            elif piece:
                self._add("reasoning" if kind == REASONING else "message", piece)

    def finish(self, status: str) -> None:
        """Closes the open item with `status` (completed / incomplete); an empty answer is one empty
        message, so every response has an output."""
        if not self.items:
            self._start("message")
        self._close(status)

    @property
    def called(self) -> bool:
        return any(item["type"] == "function_call" for item in self.items)

    def _where(self) -> dict:
        return {"item_id": self.items[-1]["id"], "output_index": len(self.items) - 1}

    def _start(self, kind: str) -> None:
        item = {"id": new_id("msg_"), "type": "message", "status": "in_progress", "role": "assistant",
                "content": []} if kind == "message" else {
            "id": new_id("rs_"), "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
        self.items.append(item)
        self._open = True
        self._emit("response.output_item.added", {"output_index": len(self.items) - 1, "item": item})
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []} if kind == "message" \
            else {"type": "reasoning_text", "text": ""}
        item["content"].append(part)
        self._emit("response.content_part.added", {**self._where(), "content_index": 0, "part": part})

    def _add(self, kind: str, piece: str) -> None:
        if not (self._open and self.items[-1]["type"] == kind):
            self._close("completed")
            self._start(kind)
        self.items[-1]["content"][0]["text"] += piece
        if kind == "message":
            self._emit("response.output_text.delta", {**self._where(), "content_index": 0, "delta": piece,
                                                      "logprobs": []})
        else:
            self._emit("response.reasoning_text.delta", {**self._where(), "content_index": 0, "delta": piece})

    def _close(self, status: str) -> None:
        if not self._open:
            return
        self._open = False
        item = self.items[-1]
        part = item["content"][0]
        item["status"] = status
        if item["type"] == "message":
            self._emit("response.output_text.done", {**self._where(), "content_index": 0,
                                                     "text": part["text"], "logprobs": []})
        else:
            self._emit("response.reasoning_text.done", {**self._where(), "content_index": 0,
                                                        "text": part["text"]})
        self._emit("response.content_part.done", {**self._where(), "content_index": 0, "part": part})
        self._emit("response.output_item.done", {"output_index": len(self.items) - 1, "item": item})

    def _call(self, payload: str) -> None:
        """A whole call: its item opens, carries its arguments as one delta, and closes."""
        call = json.loads(payload)
        if self._open_call(call["name"]) is None:
            self._streaming = None
            return
        self._streamed_call(CALL_ARGS, call["arguments"])
        self._streamed_call(TOOL_CALL, payload)

    def _open_call(self, name: str) -> dict | None:
        """A function_call item opened for a call of `name` (None: a call past the first with
        parallel_tool_calls=false, skipped)."""
        if self.called and not self.parallel:
            self._streaming = {}
            return None
        self._close("completed")
        item = {"id": new_id("fc_"), "type": "function_call", "status": "in_progress",
                "call_id": new_id("call_"), "name": name, "arguments": ""}
        self.items.append(item)
        self._streaming = item
        self._emit("response.output_item.added", {"output_index": len(self.items) - 1, "item": item})
        return item

    def _streamed_call(self, kind: str, piece: str) -> None:
        """A call's start (CALL_BEGIN: its name), an arguments piece (CALL_ARGS) or its end (TOOL_CALL)."""
        if kind == CALL_BEGIN:
            self._open_call(piece)
            return
        item, self._streaming = self._streaming, None if kind == TOOL_CALL else self._streaming
        if not item:  # skipped
            return
        if kind == CALL_ARGS:
            item["arguments"] += piece
            self._emit("response.function_call_arguments.delta", {**self._where(), "delta": piece})
            return
        item["status"] = "completed"  # the arguments sent are the call's (orcd.server.tool_scanners)
        self._emit("response.function_call_arguments.done", {**self._where(), "name": item["name"],
                                                             "arguments": item["arguments"]})
        self._emit("response.output_item.done", {"output_index": len(self.items) - 1, "item": item})

    def _emit(self, name: str, data: dict) -> None:
        if self.on_event is not None:
            self.on_event(name, data)


def response_head(rid: str, body, model: str, sampling, tools: list[dict] | None) -> dict:
    """The fields of a Response that do not change while it runs (`rid`: the job's request id, which
    /v1/cancel takes; `body`: the ResponsesRequest)."""
    return {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
            "parallel_tool_calls": body.parallel_tool_calls is not False, "previous_response_id": None,
            "store": False, "temperature": sampling.temperature, "top_p": sampling.top_p,
            "text": body.text or {"format": {"type": "text"}}, "tool_choice": body.tool_choice or "auto",
            "tools": [{"type": "function", **t["function"]} for t in tools or []], "truncation": "disabled",
            "metadata": body.metadata or {}, "error": None, "incomplete_details": None, "usage": None}


def response_body(head: dict, builder: OutputBuilder, job, error: str | None = None, cached: int = 0) -> dict:
    """The whole Response of a finished job (`builder` finished; `error`: why it failed; `cached`: prompt
    tokens the prefix cache served, TokenEvent.cached_tokens)."""
    status, _ = ENDINGS.get(job.finish_reason, ("completed", ""))
    n_in, n_out = len(job.prompt_ids), job.tokens_out
    body = {**head, "status": status, "output": copy.deepcopy(builder.items), "usage": {
        "input_tokens": n_in, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": n_out,
        "output_tokens_details": {"reasoning_tokens": builder.reasoning_tokens},
        "total_tokens": n_in + n_out}}
    if status == "incomplete":
        body["incomplete_details"] = {"reason": "max_output_tokens"}
    if status == "failed":
        body["error"] = {"code": "server_error", "message": error or "generation failed"}
    return body
