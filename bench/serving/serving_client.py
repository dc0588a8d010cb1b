"""The load generator of serving.py: raw-socket SSE clients, spread over worker processes.

One request = one HTTP/1.1 connection (keep-alive off), the body parsed incrementally: chunked
transfer-encoding removed, SSE events split on the blank line, token events counted by a byte test
(no JSON parse per token), so a client process keeps up with tens of thousands of events per second.
Times are time.perf_counter() (CLOCK_MONOTONIC: comparable across the processes of one machine).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import time
from dataclasses import dataclass, field

ROUTES = {"generate": "/v1/generate", "chat": "/v1/chat/completions"}


@dataclass
class Req:
    """One request to send: `at` seconds after the round's start (0: at once)."""

    route: str  # a key of ROUTES
    body: bytes  # the JSON body
    at: float = 0.0


@dataclass
class Result:
    t_send: float
    stamps: list[float] = field(default_factory=list)  # arrival time of each token-bearing event
    tokens: int = 0  # generated tokens as the server counted them (end.tokens_out / usage)
    t_end: float = 0.0
    error: str | None = None


class Dechunk:
    """Incremental decoder of HTTP/1.1 chunked transfer-encoding."""

    def __init__(self):
        self.buf = b""
        self.left = 0  # bytes of the current chunk still to come (+2 for its CRLF)
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out = []
        while self.buf and not self.done:
            if self.left:
                n = min(self.left, len(self.buf))
                piece, self.buf = self.buf[:n], self.buf[n:]
                out.append(piece[:max(0, self.left - 2)])  # the chunk's data, not its closing CRLF
                self.left -= n
                continue
            line_end = self.buf.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self.buf[:line_end].split(b";")[0], 16)
            self.buf = self.buf[line_end + 2:]
            if size == 0:
                self.done = True
            self.left = size + 2
        return b"".join(out)


def token_event(route: str, ev: bytes) -> bool:
    if route == "generate":
        return ev.startswith(b"event: token\n") and b'"id":null' not in ev
    return b'"delta":{"content":"' in ev and b'"delta":{"content":""' not in ev


def final_count(route: str, ev: bytes) -> int | None:
    """Generated tokens from the last event that carries the count (generate `end`, chat usage)."""
    if route == "generate" and ev.startswith(b"event: end\n"):
        return json.loads(ev.split(b"data: ", 1)[1])["tokens_out"]
    if route == "chat" and b'"usage":{' in ev and b'"completion_tokens"' in ev:
        usage = json.loads(ev[len(b"data: "):])["usage"]
        return usage["completion_tokens"] if usage else None
    return None


async def stream(host: str, port: int, req: Req, t0: float) -> Result:
    await asyncio.sleep(max(0.0, t0 + req.at - time.perf_counter()))
    res = Result(time.perf_counter())
    head = (f"POST {ROUTES[req.route]} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Connection: close\r\nContent-Length: {len(req.body)}\r\n\r\n").encode()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as err:
        res.error = f"connect: {err}"
        return res
    try:
        writer.write(head + req.body)
        status = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in status.split(b"\r\n", 1)[0]:
            res.error = (status + await reader.read(300)).decode(errors="replace")[:300]
            return res
        await _read_events(reader, req.route, res)
    except (OSError, asyncio.IncompleteReadError, ValueError) as err:
        res.error = f"{type(err).__name__}: {err}"
    finally:
        writer.close()
    res.t_end = time.perf_counter()
    return res


async def _read_events(reader: asyncio.StreamReader, route: str, res: Result) -> None:
    chunks, pending = Dechunk(), b""
    while not chunks.done:
        data = await reader.read(1 << 16)
        if not data:
            break
        now = time.perf_counter()
        pending += chunks.feed(data)
        *events, pending = pending.split(b"\n\n")
        for ev in events:
            if token_event(route, ev):
                res.stamps.append(now)
            elif ev.startswith(b"event: error") or ev.startswith(b'data: {"error"'):
                res.error = ev[:300].decode(errors="replace")
            elif (n := final_count(route, ev)) is not None:
                res.tokens = n


def _worker(host: str, port: int, reqs: list[Req], conn) -> None:
    t0 = conn.recv()  # sent once every worker is up (forking a parent that holds a model takes a while)

    async def main() -> list[Result]:
        return list(await asyncio.gather(*(stream(host, port, r, t0) for r in reqs)))

    cpu0, start = time.process_time(), max(t0, time.perf_counter())
    results = asyncio.run(main())
    # CPU seconds of this client process over the wall time of its load (its sleep before t0 is idle)
    conn.send((results, time.process_time() - cpu0, time.perf_counter() - start))
    conn.close()


def run_load(host: str, port: int, reqs: list[Req], procs: int,
             lead_s: float = 0.2) -> tuple[float, list, float]:
    """Send `reqs` from `procs` processes (round robin); returns (t0, results in request order, busy):
    t0 is the common start instant, `lead_s` after the last worker was forked; busy the largest share of
    wall time any client process spent on the CPU (near 1.0: the client may be the limit)."""
    procs = max(1, min(procs, len(reqs)))
    ctx = mp.get_context("fork")
    workers = []
    for k in range(procs):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(host, port, reqs[k::procs], child), daemon=True)
        p.start()
        child.close()
        workers.append((p, parent))
    t0 = time.perf_counter() + lead_s
    for _, parent in workers:
        parent.send(t0)
    parts = [parent.recv() for _, parent in workers]
    for p, _ in workers:
        p.join()
    out: list[Result] = [None] * len(reqs)  # type: ignore[list-item]
    for k, (part, _, _) in enumerate(parts):
        out[k::procs] = part
    return t0, out, max(cpu / wall for _, cpu, wall in parts if wall > 0)
