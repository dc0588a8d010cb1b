"""Bytes one gpt-oss decode step reads per token at one stream, from the tensor shapes and types that
`orcd synth --like gpt-oss-20b` writes (gpt_oss_shapes + gpt_oss_qtypes; ggml-org's layout: experts
MXFP4, router and 1-D tensors F32, the rest Q8_0), and the time floor at a given bandwidth.
Counted: every non-expert tensor of each layer, the routed experts' rows (top_k of n_experts, whole
expert matrices and their bias rows), the output norm and head, one embedding row. KV cache not counted.
Usage: python bench/kernels/gpt_oss_bytes.py [--like gpt-oss-20b] [--tb-s 3.35] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json

from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from orcd.gguf.presets import PRESETS
from orcd.gguf.synth_gpt_oss import gpt_oss_qtypes, gpt_oss_shapes


def nbytes(shape: tuple[int, ...], qtype) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


def step_bytes(like: str) -> dict:
    """-> {'experts': B, 'attention_etc': B, 'head': B, 'total': B} per token at one stream."""
    p = PRESETS[like]
    shapes = gpt_oss_shapes(p["vocab_size"], p["hidden"], p["n_layers"], p["ffn"], p["n_heads"],
                            p["n_kv_heads"], p["head_dim"], p["n_experts"])
    plan = gpt_oss_qtypes(shapes, p["quant"])
    frac = p["n_experts_used"] / p["n_experts"]  # routed share of an expert tensor
    out = {"experts": 0, "layers_rest": 0, "head": 0, "embedding_row": 0}
    for name, shape in shapes.items():
        b = nbytes(shape, plan.get(name, Q.F32))
        if "_exps" in name:
            out["experts"] += int(b * frac)
        elif name.startswith("blk."):
            out["layers_rest"] += b
        elif name == "token_embd.weight":
            out["embedding_row"] += b // shape[0]
        else:
            out["head"] += b
    out["total"] = sum(out.values())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--like", default="gpt-oss-20b")
    ap.add_argument("--tb-s", type=float, default=3.35, help="bandwidth for the floor (H100 SXM: 3.35)")
    ap.add_argument("--out")
    a = ap.parse_args()
    b = step_bytes(a.like)
    res = {"like": a.like, "bytes_per_token": b, "tb_s": a.tb_s,
           "floor_ms": {k: v / a.tb_s / 1e9 for k, v in b.items()}}
    for k, v in b.items():
        print(f"{k:>14}: {v / 1e6:9.1f} MB  {v / a.tb_s / 1e9:6.3f} ms at {a.tb_s} TB/s")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
