"""The int8 MoE MLP of a gpt-oss-20b decode step, per-pair (moe_mxfp4_int8.moe_mlp_i8: quantize h, gate/up,
quantize, down + residual) against expert-grouped (moe_grouped_i8.moe_mlp_i8_grouped from h already
quantized, as norm_route(quant=True) hands it over: gate/up + quantize, down, slot sum), in CUDA graphs.

LAYERS distinct random MXFP4 expert sets (32 x 2880 x 2880, top 4), each with its own random routing,
captured in one graph; us per layer from replays (CUDA events). Also the expert tiles each path reads per
layer: distinct experts (grouped) vs pairs (per pair), and the bytes that makes. Then launch sweeps of the
grouped gate/up kernel at 1 and 8 tokens and of the down kernel at 8, and norm_route's router step
width (--sweep).

usage: python bench/kernels/moe_grouped_sweep.py OUT.json [--tokens 1,2,4,8] [--sweep]
Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from orcd.quant.kernels.moe_grouped_i8 import DOWN_LAUNCH, GLU_LAUNCH, moe_mlp_i8_grouped  # noqa: E402
from orcd.quant.kernels.moe_mxfp4_int8 import moe_mlp_i8  # noqa: E402
from orcd.quant.kernels.moe_router import ROUTE_LAUNCH, norm_route  # noqa: E402
from orcd.quant.kernels.xquant import quantize_x  # noqa: E402

E, TOP_K, H, F, LAYERS = 32, 4, 2880, 2880, 8
EXPERT_BYTES = 3 * H * F // 32 * 17  # gate, up, down MXFP4 (17 bytes per 32 weights)


def split(gen: torch.Generator, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random split MXFP4 (scales [E, n, k / 32] near 2 ** 0, codes [E, n, k / 2]) on the GPU."""
    s = torch.randint(124, 130, (E, n, k // 32), dtype=torch.uint8, device="cuda", generator=gen)
    q = torch.randint(0, 256, (E, n, k // 2), dtype=torch.uint8, device="cuda", generator=gen)
    return s, q


def layers(tokens: int, gen: torch.Generator) -> list[dict]:
    out = []
    for _ in range(LAYERS):
        ids = torch.stack([torch.randperm(E, device="cuda", generator=gen)[:TOP_K] for _ in range(tokens)])
        out.append(dict(w=(split(gen, F, H), split(gen, F, H), split(gen, H, F)),
                        b=tuple(torch.randn(E, m, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.1
                                for m in (F, F, H)),
                        ids=ids.view(-1), rw=torch.rand(tokens * TOP_K, device="cuda", generator=gen),
                        distinct=ids.unique().numel()))
    return out


def time_graph(fn, reps: int = 50) -> float:
    """us per call of fn (all layers) from a CUDA graph's replays."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1000 / reps


def measure(tokens: int, gen: torch.Generator, launches=None, old: bool = True) -> dict:
    ls = layers(tokens, gen)
    h = torch.randn(tokens, H, device="cuda", dtype=torch.bfloat16, generator=gen)
    hq = quantize_x(h)
    res = torch.zeros(tokens, H, device="cuda", dtype=torch.bfloat16)

    def per_pair():
        for L in ls:
            moe_mlp_i8(h, L["ids"], *L["w"], L["b"], L["rw"], TOP_K, res)

    def grouped():
        for L in ls:
            moe_mlp_i8_grouped(hq, L["ids"], *L["w"], L["b"], L["rw"], TOP_K, res, launches=launches)

    distinct = sum(L["distinct"] for L in ls) / LAYERS
    row = dict(tokens=tokens, distinct_experts=distinct, pairs=tokens * TOP_K,
               grouped_us=time_graph(grouped) / LAYERS)
    row["grouped_GBs"] = distinct * EXPERT_BYTES / row["grouped_us"] / 1e3
    if old:
        row["per_pair_us"] = time_graph(per_pair) / LAYERS
        row["per_pair_GBs"] = distinct * EXPERT_BYTES / row["per_pair_us"] / 1e3  # DRAM bytes if L2 dedupes
    return row


def route_us(tokens: int, launch, gen: torch.Generator, n: int = 24) -> float:
    """us per norm_route(quant=True) call: n calls with n distinct routers (32 x 2880 bf16; they fit in
    L2 here, unlike in the step where the experts pass through between layers) in one graph."""
    res = torch.randn(tokens, H, device="cuda", dtype=torch.bfloat16, generator=gen)
    nw = torch.ones(H, device="cuda", dtype=torch.bfloat16)
    routers = [(torch.randn(E, H, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.05,
                torch.zeros(E, device="cuda", dtype=torch.bfloat16)) for _ in range(n)]

    def run():
        for w, b in routers:
            norm_route(res, nw, 1e-5, w, b, TOP_K, quant=True, launch=launch)

    return time_graph(run) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tokens", default="1,2,4,8")
    ap.add_argument("--sweep", action="store_true", help="also the launch sweeps")
    a = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    res = {"device": torch.cuda.get_device_name(), "glu_launch": GLU_LAUNCH, "down_launch": DOWN_LAUNCH,
           "rows": [measure(int(t), gen) for t in a.tokens.split(",")], "sweep": []}
    Path(a.out).write_text(json.dumps(res, indent=1))  # written again with the sweep
    glu = [(32, 4, 4), (32, 16, 4), (64, 8, 8)]
    down = [(16, 8, 4), (8, 16, 4), (32, 16, 4)]
    plan = [(t, lg, DOWN_LAUNCH) for t in (1, 8) for lg in glu] + [(8, GLU_LAUNCH, ld) for ld in down]
    for t, lg, ld in plan if a.sweep else []:
        res["sweep"].append(dict(glu=lg, down=ld, **measure(t, gen, (lg, ld), old=False)))
        Path(a.out).write_text(json.dumps(res, indent=1))
    routes = [ROUTE_LAUNCH, (256, 8), (512, 8), (512, 16), (1024, 16)] if a.sweep else []
    res["route"] = [dict(tokens=t, launch=lr, us=route_us(t, lr, gen)) for t in (1, 8) for lr in routes]
    Path(a.out).write_text(json.dumps(res, indent=1))
    print("norm_route(quant=True) (tokens | (BK, warps) | us per call)")
    for r in res["route"]:
        print(r["tokens"], r["launch"], f"{r['us']:.1f}", sep=" | ")
    print("sweep (tokens | glu launch | down launch | grouped us/layer)")
    for r in res["sweep"]:
        print(r["tokens"], r["glu"], r["down"], f"{r['grouped_us']:.1f}", sep=" | ")
    print(f"{res['device']}: int8 MoE MLP per layer, {LAYERS} layers in a graph (glu {GLU_LAUNCH}, down "
          f"{DOWN_LAUNCH})\ntokens | distinct experts | pairs | per-pair us | grouped us | GB/s of distinct "
          "experts per-pair / grouped")
    for r in res["rows"]:
        print(r["tokens"], f"{r['distinct_experts']:.1f}", r["pairs"], f"{r['per_pair_us']:.1f}",
              f"{r['grouped_us']:.1f}", f"{r['per_pair_GBs']:,.0f} / {r['grouped_GBs']:,.0f}", sep=" | ")


if __name__ == "__main__":
    main()
