"""The choices of an OpenAI response, from n Jobs: streamed as merged chunks, or collected.

Streams are `data: {chunk}` events ending with `data: [DONE]`; a failure inside a choice is
`data: {"error": {...}}` (what the OpenAI SDKs raise on), then `[DONE]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from orcd.engine.io import TokenEvent
from orcd.server.errors import APIError, error_body
from orcd.server.jobs import Job, JobHub
from orcd.server.logprobs_format import CompletionLogprobs, TokenNames, chat_content, scored
from orcd.server.reasoning import Splitter
from orcd.server.sse import PING, sse_event
from orcd.server.tools import ToolDeltas, fields, message_fields

FINISH = {"eos": "stop", "stop": "stop", "length": "length", "cancelled": "cancelled", "error": "error"}


@dataclass
class ChoiceFormat:
    """What differs between chat choices (`delta` / `message`) and completion choices (`text`)."""

    chat: bool
    names: TokenNames | None = None  # set when the request asked for logprobs
    echo: str = ""  # completions: the prompt text returned before the generated text
    split: Callable[[], Splitter] | None = None  # chat: reasoning models' splitter (orcd.server.reasoning)
    _legacy: dict[int, CompletionLogprobs] = field(default_factory=dict)
    _splitters: dict[int, Splitter] = field(default_factory=dict)
    _calls: dict[int, ToolDeltas] = field(default_factory=dict)  # per choice: its tool calls so far
    cached: int = 0  # prompt tokens the prefix cache served to choice 0 (the choice that prefilled)

    def saw(self, index: int, events: list[TokenEvent]) -> None:
        """Note choice `index`'s events (only choice 0's cached tokens count: forks share its blocks)."""
        if index == 0:
            self.cached = max([self.cached, *(ev.cached_tokens for ev in events)])

    def first(self) -> dict | None:
        if self.chat:
            return {"delta": {"role": "assistant", "content": ""}}
        return {"text": self.echo} if self.echo else None

    def piece(self, text: str, index: int = 0, final: bool = False) -> dict | None:
        """The delta for a text increment of choice `index` (`final`: its last), None if nothing to send.
        A reasoning model's deltas carry `reasoning_content` and/or `content`."""
        if self.chat and self.split is not None:
            splitter = self._splitters.setdefault(index, self.split())
            calls = self._calls.setdefault(index, ToolDeltas())
            delta = fields(splitter.push(text) + (splitter.flush() if final else []), calls)
            return {"delta": delta} if delta else None
        if not text:
            return None
        return {"delta": {"content": text}} if self.chat else {"text": text}

    def blank(self) -> dict:
        return {"delta": {"content": ""}} if self.chat else {"text": ""}

    def end(self) -> dict:
        return {"delta": {}} if self.chat else {"text": ""}

    def finish(self, index: int, reason: str) -> str:
        """`tool_calls` for a choice that ended on its own after calling tools."""
        calls = self._calls.get(index)
        return "tool_calls" if reason == "stop" and calls is not None and calls.count else reason

    def logprobs(self, index: int, events: list[TokenEvent]) -> dict | None:
        if self.names is None:
            return None
        if self.chat:
            return {"content": chat_content(self.names, scored(events)), "refusal": None}
        if index not in self._legacy:
            self._legacy[index] = CompletionLogprobs(self.names, len(self.echo))
        return self._legacy[index].block(events)

    def full(self, index: int, events: list[TokenEvent], reason: str) -> dict:
        self.saw(index, events)
        text = "".join(ev.text for ev in events)
        body = {"message": {"role": "assistant", "content": text}} if self.chat else {
            "text": self.echo + text}
        if self.chat and self.split is not None:
            body["message"].update(message_fields(self.split(), text))
            self._calls[index] = ToolDeltas()
            self._calls[index].count = len(body["message"].get("tool_calls", ()))
        return {"index": index, **body, "logprobs": self.logprobs(index, events),
                "finish_reason": self.finish(index, reason)}


def usage(jobs: list[Job], cached: int = 0) -> dict:
    """The prompt counts once (it is prefilled once), every choice's tokens count; `cached`: prompt
    tokens the prefix cache served (ChoiceFormat.cached)."""
    n_in, n_out = len(jobs[0].prompt_ids), sum(job.tokens_out for job in jobs)
    return {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out,
            "prompt_tokens_details": {"cached_tokens": cached}}


_DONE = object()


async def _merged(hub: JobHub, jobs: list[Job]) -> AsyncIterator[tuple[int, list[TokenEvent] | None]]:
    """(choice index, batch) from every job as it comes; None batches are ping ticks."""
    if len(jobs) == 1:
        async with contextlib.aclosing(hub.event_batches(jobs[0])) as batches:
            async for batch in batches:
                yield 0, batch
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, job: Job) -> None:
        try:
            async with contextlib.aclosing(hub.event_batches(job)) as batches:
                async for batch in batches:
                    await queue.put((i, batch))
        finally:
            queue.put_nowait((i, _DONE))

    tasks = [asyncio.ensure_future(pump(i, job)) for i, job in enumerate(jobs)]
    try:
        left = len(jobs)
        while left:
            i, batch = await queue.get()
            if batch is _DONE:
                left -= 1
            else:
                yield i, batch
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class TextFrames:
    """The commonest chunk pre-encoded: one choice, a plain text piece, no logprobs, not the last. Each
    choice's frame is built once by `emit` around a marker text and split there, so the bytes equal
    emit's for every text that sse_event would not escape (checked per text; others take emit)."""

    MARK = "\ue000orcd-text\ue001"  # private-use characters: never a real piece

    def __init__(self, emit: Callable[[list], bytes], chat: bool):
        self.emit, self.chat = emit, chat
        self.parts: dict[int, tuple[bytes, bytes]] = {}  # choice index -> (before, after the text's JSON)

    def text_of(self, part: dict) -> str | None:
        if len(part) != 1:
            return None
        if not self.chat:
            return part.get("text")
        delta = part.get("delta")
        return delta.get("content") if delta is not None and len(delta) == 1 else None

    def get(self, index: int, part: dict) -> bytes | None:
        text = self.text_of(part)
        if not isinstance(text, str):
            return None
        quoted = json.dumps(text, ensure_ascii=False)
        if "\x85" in quoted or "\u2028" in quoted or "\u2029" in quoted:
            return None
        if index not in self.parts:
            piece = {"delta": {"content": self.MARK}} if self.chat else {"text": self.MARK}
            frame = self.emit([{"index": index, **piece, "logprobs": None, "finish_reason": None}])
            before, mark, after = frame.partition(json.dumps(self.MARK, ensure_ascii=False).encode())
            self.parts[index] = (before, after)
        before, after = self.parts[index]
        return before + quoted.encode() + after


async def stream_choices(hub: JobHub, jobs: list[Job], fmt: ChoiceFormat, chunk: Callable[[list], dict],
                         include_usage: bool) -> AsyncIterator[bytes]:
    """`chunk(choices)` wraps a list of choices into the route's chunk object."""
    def emit(choices: list, use: dict | None = None) -> bytes:
        body = chunk(choices)
        if include_usage:
            body["usage"] = use
        return sse_event(body)

    def choice(i: int, part: dict, events: list[TokenEvent], reason: str | None = None) -> dict:
        return {"index": i, **part, "logprobs": fmt.logprobs(i, events) if events else None,
                "finish_reason": reason}

    frames = TextFrames(emit, fmt.chat)
    if (first := fmt.first()) is not None:
        yield b"".join(emit([{"index": i, **first, "logprobs": None, "finish_reason": None}])
                       for i in range(len(jobs)))
    async with contextlib.aclosing(_merged(hub, jobs)) as batches:
        async for i, batch in batches:
            if batch is None:
                yield PING
                continue
            fmt.saw(i, batch)
            out: list[bytes] = []  # a batch of events goes out as one write
            for ev in batch:
                part = fmt.piece(ev.text, i, ev.finished)
                if part is not None and fmt.names is None and (frame := frames.get(i, part)) is not None:
                    out.append(frame)  # the commonest chunk, pre-encoded
                elif part is not None or (fmt.names is not None and scored([ev])):
                    out.append(emit([choice(i, part or fmt.blank(), [ev])]))
                if ev.finished and jobs[i].finish_reason == "error":
                    out.append(sse_event(error_body(500, ev.error or "generation failed", None,
                                                    "generation_failed")))
                    yield b"".join(out) + sse_event("[DONE]")
                    return
                if ev.finished:
                    out.append(emit([choice(i, fmt.end(), [], fmt.finish(i, FINISH[jobs[i].finish_reason]))]))
            if out:
                yield b"".join(out)
    if include_usage:
        yield emit([], usage(jobs, fmt.cached))
    yield sse_event("[DONE]")


async def collect_choices(hub: JobHub, jobs: list[Job], fmt: ChoiceFormat, receive) -> list[dict]:
    per_job = await hub.collect(jobs, receive)
    for job in jobs:
        if job.finish_reason == "error":
            raise APIError(500, job.error or "generation failed", code="generation_failed")
    return [fmt.full(i, events, FINISH[job.finish_reason])
            for i, (job, events) in enumerate(zip(jobs, per_job, strict=True))]
