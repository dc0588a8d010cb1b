"""Pre-encoded SSE frames (issue 19) give the same bytes as the generic path for every text."""

from __future__ import annotations

import json

import pytest

from orcd.server.openai_stream import TextFrames
from orcd.server.sse import sse_event

TEXTS = ["hello", " world", "", "é", "日本", "a\nb", 'q"uote\\', "\t\r", "\x00\x1f", "\x85", "x\u2028y",
         "\u2029", "😀", "</s>", "\ue000orcd-text\ue001"]


def _slow_sse(data, event=None) -> bytes:
    """sse_event before its one-line fast path: the reference."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("\x85", "\\u0085").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    lines = [f"event: {event}"] if event else []
    lines += [f"data: {line}" for line in payload.split("\n")]
    return ("\n".join(lines) + "\n\n").encode("utf-8")


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("event", [None, "token"])
def test_sse_event_fast_path_equals_the_generic_framing(text, event):
    body = {"choices": [{"delta": {"content": text}}], "usage": None}
    assert sse_event(body, event) == _slow_sse(body, event)
    assert sse_event("[DONE]") == b"data: [DONE]\n\n"


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("include_usage", [True, False])
def test_text_frames_equal_emit(chat, include_usage):
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "m"}

    def emit(choices):
        body = {**head, "choices": choices}
        if include_usage:
            body["usage"] = None
        return sse_event(body)

    frames, checked = TextFrames(emit, chat), 0
    for index in (0, 2):
        for text in TEXTS[:-1]:
            part = {"delta": {"content": text}} if chat else {"text": text}
            frame = frames.get(index, part)
            want = emit([{"index": index, **part, "logprobs": None, "finish_reason": None}])
            if frame is not None:
                assert frame == want, text
                checked += 1
            else:  # only texts that sse_event escapes take the generic path
                assert any(c in text for c in "\x85\u2028\u2029")
    assert checked == 2 * 11
    other = {"delta": {"content": "x", "reasoning_content": "y"}} if chat else {"text": "x", "more": 1}
    assert frames.get(0, other) is None  # any other shape: the generic path
