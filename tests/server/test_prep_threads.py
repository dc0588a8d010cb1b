"""Where request preparation runs: short prompts and short chats on the event loop, long ones on a
worker thread (orcd.server.prep); labelled metric children looked up once (orcd.server.metrics)."""

from __future__ import annotations

import asyncio
import threading

from orcd.server.metrics import ServerMetrics
from orcd.server.prep import INLINE_PROMPT_CHARS, encode_text


class ThreadRecordingTokenizer:
    """Records the thread of every call; ids are word counts, enough to check results come back."""

    def __init__(self):
        self.threads: list[threading.Thread] = []

    def encode_prompt(self, text: str) -> list[int]:
        self.threads.append(threading.current_thread())
        return list(range(len(text.split())))

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True, **kw) -> list[int]:
        self.threads.append(threading.current_thread())
        return [7] * len(messages)


def test_short_prompts_and_chats_on_the_loop_long_ones_off_it():
    tok = ThreadRecordingTokenizer()

    async def run() -> tuple[threading.Thread, list]:
        short = await encode_text(tok, "a b c", chat=False, ctx=100)
        at_limit = await encode_text(tok, "x" * INLINE_PROMPT_CHARS, chat=False, ctx=100)
        long = await encode_text(tok, "a " * INLINE_PROMPT_CHARS, chat=False, ctx=10**6)
        chat = await encode_text(tok, "hi", chat=True, ctx=100)
        long_chat = await encode_text(tok, "x" * (INLINE_PROMPT_CHARS + 1), chat=True, ctx=100)
        return threading.current_thread(), [short, at_limit, long, chat, long_chat]

    loop_thread, results = asyncio.run(run())
    assert results == [[0, 1, 2], [0], list(range(INLINE_PROMPT_CHARS)), [7], [7]]
    on_loop = [t is loop_thread for t in tok.threads]
    assert on_loop == [True, True, False, True, False]


def test_metric_children_are_cached_and_counted():
    m = ServerMetrics(dict, lambda: 0)
    a = m.child(m.requests, "generate", "stop")
    assert m.child(m.requests, "generate", "stop") is a
    assert m.child(m.requests, "chat", "stop") is not a
    assert m.child(m.model_requests, "generate", "stop", "x") is not a  # same labels, other metric
    a.inc()
    m.child(m.requests, "generate", "stop").inc(2)
    assert 'orcd_requests_total{outcome="stop",route="generate"} 3.0' in m.render().decode()
