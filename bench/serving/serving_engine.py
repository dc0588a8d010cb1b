"""The engine side of serving.py: the same requests the HTTP client sends, run through an engine in this
process (LLMEngine.step(), or the fake engine of serving_fake.py), timed the way the client times them.

A request's prompt ids are what `orcd serve` prefills for its body: `/v1/generate` text through
Tokenizer.encode_prompt, a chat turn through Tokenizer.encode_chat (the template's tokens included), so
engine and HTTP rounds do the same work. Arrivals follow each Req's `at` (0: all at once; the mixed
load's Poisson times otherwise). Per request: the arrival instant, the instant of each step that gave it
a token, the tokens generated: serving_client.Result, so serving_load's statistics apply unchanged.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from serving_client import Req, Result


@dataclass(frozen=True)
class EngineReq:
    ids: list[int]  # prompt token ids, as the server would prefill them
    max_tokens: int
    at: float  # seconds after the round's start


def engine_requests(tok, reqs: list[Req]) -> list[EngineReq]:
    out = []
    for r in reqs:
        body = json.loads(r.body)
        ids = tok.encode_chat(body["messages"]) if r.route == "chat" else tok.encode_prompt(body["prompt"])
        out.append(EngineReq(ids, body["max_tokens"], r.at))
    return out


def run_engine(engine, reqs: list[EngineReq], tag: str, sync=lambda: None) -> tuple[float, list[Result]]:
    """Add each request at its arrival time, step until all finish; -> (t0, results in request order).
    A token's time is taken after the step that made it (a step ends with the sampled ids on the host)."""
    from orcd.engine.io import EngineRequest
    from orcd.engine.sampling_params import SamplingParams

    order = sorted(range(len(reqs)), key=lambda i: reqs[i].at)
    results: list[Result] = [Result(0.0) for _ in reqs]
    by_id: dict[str, Result] = {}
    sync()
    t0, nxt = time.perf_counter(), 0
    while nxt < len(order) or engine.has_work():
        now = time.perf_counter()
        while nxt < len(order) and t0 + reqs[order[nxt]].at <= now:
            i = order[nxt]
            rid = f"{tag}-{i}"
            sp = SamplingParams(max_tokens=reqs[i].max_tokens, temperature=0.0, ignore_eos=True)
            engine.add_validated(EngineRequest(rid, list(reqs[i].ids), sp))
            results[i].t_send, by_id[rid] = now, results[i]
            nxt += 1
        if not engine.has_work():  # idle until the next arrival
            time.sleep(max(0.0, t0 + reqs[order[nxt]].at - time.perf_counter()))
            continue
        events = engine.step()
        now = time.perf_counter()
        for ev in events:
            res = by_id[ev.request_id]
            if ev.token_id is not None:
                res.stamps.append(now)
            if ev.finished:
                res.tokens, res.t_end = ev.generated_tokens, now
                res.error = ev.error
    sync()
    return t0, results


class EngineBench:
    """An engine in this process (LLMEngine, or the fake engine), kept alive between the HTTP rounds it
    alternates with; `info` says how it was built."""

    def __init__(self, engine, sync=lambda: None, info: dict | None = None):
        self.engine, self.sync, self.info = engine, sync, info or {}
        self.rounds = 0

    def run(self, reqs: list[EngineReq]) -> tuple[float, list[Result]]:
        self.rounds += 1
        return run_engine(self.engine, reqs, f"e{self.rounds}", self.sync)


def load_engine_bench(path: str, device: str, num_kv_blocks: int, max_num_seqs: int) -> EngineBench:
    """LLMEngine of one model file, shaped like the server's engine (same KV pool and batch limits, CUDA
    graphs -- decode and prefill -- captured at start)."""
    import torch

    from orcd.engine.llm_engine import LLMEngine
    from orcd.loading.loader import load_model

    loaded = load_model(path, device=device)
    t0 = time.perf_counter()
    engine = LLMEngine(loaded, num_kv_blocks=num_kv_blocks, max_num_seqs=max_num_seqs)
    graph = getattr(engine.runner, "graph", None)
    info = {"load_s": loaded.load_seconds, "engine_init_s": time.perf_counter() - t0,
            "decode_graphs": None if graph is None else {"buckets": list(graph.buckets),
                                                         "capture_s": graph.capture_seconds},
            "prefill_graphs": engine.prefill_graph_warmup, "num_kv_blocks": num_kv_blocks}
    dev = loaded.device
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    return EngineBench(engine, sync, info)
