"""Server-Sent-Events framing and a streaming response that notices client disconnects.

Framing (WHATWG EventSource): optional `event: NAME` line, one `data: ` line per line of payload,
then a blank line. Comments (`: ping`) keep idle proxies from dropping a stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

PING = b": ping\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One framed event. `data` is JSON-encoded unless it is already a str."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if event is None and "\n" not in payload and payload.isascii():  # the common case: one plain line
        return b"data: " + payload.encode() + b"\n\n"
    # Clients that split lines with str.splitlines (httpx's aiter_lines) also break at NEL, LS and PS:
    # escape them so every JSON payload stays on its line (same decoded string).
    payload = payload.replace("\x85", "\\u0085").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    lines = [f"event: {event}"] if event else []
    lines += [f"data: {line}" for line in payload.split("\n")]
    # The spec also treats a lone \r as a line end: JSON never has one raw, and str payloads are ours.
    return ("\n".join(lines) + "\n\n").encode("utf-8")


class SSEResponse(StreamingResponse):
    """text/event-stream response. A client disconnect cancels the body iterator at its current await;
    `on_close` runs exactly once afterwards, even when the body never started (it releases the request)."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None] | None = None):
        super().__init__(content, headers=SSE_HEADERS, media_type=self.media_type)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:

                async def stream_then_stop() -> None:
                    await self.stream_response(send)
                    tg.cancel_scope.cancel()

                async def watch_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(stream_then_stop)
                tg.start_soon(watch_disconnect)
        except OSError:
            pass  # the socket went away mid-write: same as a disconnect
        finally:
            with anyio.CancelScope(shield=True):
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
            if self.on_close is not None:
                self.on_close()


class PingClock:
    """One timer per stream for `: ping`: resolves the reader's pending wait with False once `interval_s`
    passes with no events (the timer is re-armed once per interval, not once per event)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float):
        self.loop, self.interval_s = loop, interval_s
        self.last = loop.time()  # the loop clock when events last came (or a ping went out)
        self.pending: asyncio.Future | None = None
        self.handle = loop.call_at(self.last + interval_s, self._fire)

    def touch(self) -> None:
        self.last = self.loop.time()

    def _fire(self) -> None:
        now, due = self.loop.time(), self.last + self.interval_s
        if now >= due:
            if self.pending is not None and not self.pending.done():
                self.pending.set_result(False)  # the reader yields a ping, then waits again
            self.last, due = now, now + self.interval_s
        self.handle = self.loop.call_at(due, self._fire)

    def close(self) -> None:
        self.handle.cancel()
