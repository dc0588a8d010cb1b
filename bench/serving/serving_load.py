"""Request sets and their statistics for serving.py: fixed-concurrency rounds and the mixed load.

Fixed rounds: C requests sent at once, greedy, ignore_eos, prompt_len tokens in, gen_len out.
Mixed load (as `vllm bench serve` reports it): prompt and output lengths drawn from a log-normal
(long tail), clipped; arrivals a Poisson process at a given rate; per request TTFT, TPOT (mean gap
after the first token) and every inter-token gap; goodput = requests per second meeting both SLOs.
"""

from __future__ import annotations

import json
import math
import random

from batching_common import prompt_texts
from serving_client import Req, Result


def body(route: str, text: str, max_tokens: int, model: str) -> bytes:
    fields = {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True, "model": model}
    if route == "chat":
        fields.update(messages=[{"role": "user", "content": text}], stream_options={"include_usage": True})
    else:
        fields.update(prompt=text)
    return json.dumps(fields).encode()


def fixed_round(tok, route: str, n: int, prompt_len: int, gen_len: int, model: str, seed: int) -> list[Req]:
    return [Req(route, body(route, t, gen_len, model)) for t in prompt_texts(tok, n, prompt_len, seed)]


def lognormal_lengths(rng: random.Random, n: int, median: int, lo: int, hi: int, sigma: float) -> list[int]:
    return [min(hi, max(lo, round(median * math.exp(rng.gauss(0.0, sigma))))) for _ in range(n)]


def mixed_requests(tok, route: str, rate: float, seconds: float, model: str, seed: int,
                   prompt: tuple[int, int, int] = (128, 16, 1024),
                   output: tuple[int, int, int] = (128, 16, 512),
                   sigma: float = 0.8) -> list[Req]:
    """Poisson arrivals at `rate` req/s for `seconds`; lengths (median, lo, hi) log-normal with `sigma`."""
    rng = random.Random(seed)
    at, times = 0.0, []
    while True:
        at += rng.expovariate(rate)
        if at >= seconds:
            break
        times.append(at)
    n = max(1, len(times))
    times = times or [0.0]
    p_lens = lognormal_lengths(rng, n, *prompt, sigma)
    o_lens = lognormal_lengths(rng, n, *output, sigma)
    reqs = []
    for i, (t, p, o) in enumerate(zip(times, p_lens, o_lens, strict=True)):
        text = prompt_texts(tok, 1, p, seed * 100_003 + i)[0]
        reqs.append(Req(route, body(route, text, o, model), at=t))
    return reqs


def pct(xs: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between ranks; None for no data."""
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 3)


def latency(results: list[Result]) -> dict:
    ok = [r for r in results if r.error is None and r.stamps]
    ttft = [r.stamps[0] - r.t_send for r in ok]
    itl = [b - a for r in ok for a, b in zip(r.stamps, r.stamps[1:], strict=False)]
    tpot = [(r.stamps[-1] - r.stamps[0]) / (r.tokens - 1) for r in ok if r.tokens > 1]
    return {"ttft_p50_ms": ms(pct(ttft, 50)), "ttft_p99_ms": ms(pct(ttft, 99)),
            "itl_p50_ms": ms(pct(itl, 50)), "itl_p99_ms": ms(pct(itl, 99)),
            "tpot_mean_ms": ms(sum(tpot) / len(tpot)) if tpot else None,
            "errors": [r.error for r in results if r.error][:3],
            "n_errors": sum(bool(r.error) for r in results)}


def round_stats(t0: float, results: list[Result]) -> dict:
    """Fixed round: aggregate tok/s end to end (first send to last byte), latency percentiles."""
    tokens = sum(r.tokens for r in results)
    t_end = max((r.t_end for r in results), default=t0)
    wall = t_end - t0
    return {"tokens": tokens, "wall_s": round(wall, 4), "http_tok_s": tokens / wall if wall > 0 else None,
            **latency(results)}


def mixed_stats(t0: float, results: list[Result], rate: float, slo_ttft_s: float, slo_tpot_s: float) -> dict:
    """vLLM-style: request and output throughput, goodput under (TTFT, TPOT) SLOs, percentiles."""
    wall = max((r.t_end for r in results), default=t0) - t0
    good = 0
    for r in results:
        if r.error is None and r.stamps:
            tpot = (r.stamps[-1] - r.stamps[0]) / (r.tokens - 1) if r.tokens > 1 else 0.0
            good += (r.stamps[0] - r.t_send) <= slo_ttft_s and tpot <= slo_tpot_s
    out = {"rate_req_s": round(rate, 3), "requests": len(results), "wall_s": round(wall, 3),
           "req_s": len(results) / wall if wall > 0 else None,
           "output_tok_s": sum(r.tokens for r in results) / wall if wall > 0 else None,
           "goodput_req_s": good / wall if wall > 0 else None, "good_fraction": good / max(1, len(results)),
           "slo_ttft_ms": slo_ttft_s * 1000, "slo_tpot_ms": slo_tpot_s * 1000}
    return {**out, **latency(results)}
