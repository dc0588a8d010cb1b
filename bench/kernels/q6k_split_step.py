"""Where the 7B's gguf and split Q6_K layouts part (issue 16): greedy_repeat.py found both repeatable and
equal for 8 prompts together, but one prompt alone parts at its 10th token. This runs the same work
through both models eagerly (no CUDA graphs): a 64-token prefill (DecoderModel.forward + compute_logits,
the products QuantLinear.forward gives) and then STEPS decode steps of one row through FusedDecoder (the
int8 norm-fused step), feeding both the gguf model's greedy token, and prints the largest |split - gguf|
of the prefill's hidden states and of each step's logits (0 everywhere: bit-equal), the first prefill
product (QuantLinear, in call order) whose input or output differs, and after each step the first layer
whose cached K/V differ.

usage: python bench/kernels/q6k_split_step.py --model 7b.gguf [--steps 12] [--rows 1]   (CUDA)
"""

from __future__ import annotations

import argparse
import random

import torch

from orcd.loading.loader import load_model
from orcd.models.kv_cache import KVCache
from orcd.models.layers.attention import AttnMetadata
from orcd.quant.linear import QuantLinear
from orcd.runner.fused_decode import FusedDecoder

PAGE = 16


def meta_for(pos: torch.Tensor, q_lens: list[int], tables: torch.Tensor) -> AttnMetadata:
    """Metadata of one step: sequence i adds q_lens[i] tokens at positions pos (flattened)."""
    dev = pos.device
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    seq_of = torch.repeat_interleave(torch.arange(len(q_lens), device=dev), torch.tensor(q_lens, device=dev))
    slots = tables[seq_of, pos // PAGE].long() * PAGE + pos % PAGE
    ends = torch.tensor([int(pos[int(cu[i + 1]) - 1]) + 1 for i in range(len(q_lens))], dtype=torch.int32,
                        device=dev)
    return AttnMetadata(cu_seqlens_q=cu, seq_lens=ends, block_tables=tables, slot_mapping=slots,
                        max_query_len=max(q_lens), max_seq_len=int(ends.max()))


def record_products(model) -> tuple[list, list]:
    """Forward hooks on every QuantLinear of `model`: (records, handles); each call appends (name, x, y)."""
    records, handles = [], []
    for name, mod in model.named_modules():
        if isinstance(mod, QuantLinear):
            hook = (lambda n: lambda m, args, out: records.append((n, args[0].clone(), out.clone())))(name)
            handles.append(mod.register_forward_hook(hook))
    return records, handles


def first_difference(recs: dict) -> str:
    """The first product (in call order) whose input or output differs between the layouts."""
    for (name, xg, yg), (_, xs, ys) in zip(recs["gguf"], recs["split"], strict=True):
        if not torch.equal(xg, xs):
            return f"{name}: input differs (max {(xs.float() - xg.float()).abs().max():.3e}): upstream"
        if not torch.equal(yg, ys):
            return f"{name}: same input, output differs (max {(ys.float() - yg.float()).abs().max():.3e})"
    return f"none of {len(recs['gguf'])} products"


def kv_difference(kvs: dict) -> str:
    """The first layer whose cached K or V differ between the layouts (the caches hold every step so
    far): the layer whose k / v products, or whose input, first differ."""
    g, s = kvs["gguf"], kvs["split"]
    for i in range(len(g.k)):
        for part, a, b in (("k", g.k[i], s.k[i]), ("v", g.v[i], s.v[i])):
            if not torch.equal(a, b):
                return f"layer {i} {part} (max {(b.float() - a.float()).abs().max():.3e})"
    return "none"


@torch.inference_mode()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--device", default="cuda", help="cpu (TRITON_INTERPRET=1): a dry run, gguf twice")
    a = ap.parse_args()
    dev, second = a.device, "split" if a.device == "cuda" else "gguf"
    models = {"gguf": load_model(a.model, device=dev, keep_quantized=True, q6k_layout="gguf"),
              "split": load_model(a.model, device=dev, q6k_layout=second, keep_quantized=True)}
    cfg = models["gguf"].cfg
    pages = -(-(a.prompt + a.steps) // PAGE)
    tables = torch.arange(a.rows * pages, dtype=torch.int32, device=dev).view(a.rows, pages)
    dtype = models["gguf"].dtype
    kvs = {lay: KVCache.allocate(cfg, a.rows * pages, PAGE, dev, dtype) for lay in models}
    # row i's prompt is greedy_repeat.py's prompt i (its one-prompt run parts at the 10th token)
    rngs = [random.Random(r) for r in range(a.rows)]
    ids = torch.tensor([rng.randrange(100, 150000) for rng in rngs for _ in range(a.prompt)], device=dev)
    pos = torch.arange(a.prompt, device=dev).repeat(a.rows)
    meta = meta_for(pos, [a.prompt] * a.rows, tables)
    recs, hid, logit = {}, {}, {}
    last = torch.arange(1, a.rows + 1, device=dev) * a.prompt - 1
    for lay, m in models.items():  # the prefill, every product's input and output recorded
        recs[lay], handles = record_products(m.model)
        hid[lay] = m.model(ids, pos, meta, kvs[lay])
        logit[lay] = m.model.compute_logits(hid[lay][last])
        for h in handles:
            h.remove()
    print(f"prefill: first product that differs: {first_difference(recs)}")
    del recs
    print("| step | rows | max abs hidden / logits split - gguf | argmax equal | first K/V that differs |")
    print("|---|---|---|---|---|")
    print(f"| prefill {a.prompt} | {a.rows} | {(hid['split'] - hid['gguf']).abs().max():.3e} / "
          f"{(logit['split'] - logit['gguf']).abs().max():.3e} | "
          f"{bool((logit['split'].argmax(-1) == logit['gguf'].argmax(-1)).all())} | {kv_difference(kvs)} |")
    decs = {lay: FusedDecoder(m.model) for lay, m in models.items()}
    tok = logit["gguf"].argmax(-1)
    pos = torch.full((a.rows,), a.prompt, device=dev)
    for s in range(a.steps):
        meta = meta_for(pos, [1] * a.rows, tables)
        out = {lay: decs[lay](tok, pos, meta, kvs[lay]) for lay in decs}
        d = (out["split"] - out["gguf"]).abs().max()
        same = bool((out["split"].argmax(-1) == out["gguf"].argmax(-1)).all())
        print(f"| decode {s} | {a.rows} | - / {d:.3e} | {same} | {kv_difference(kvs)} |", flush=True)
        tok, pos = out["gguf"].argmax(-1), pos + 1


if __name__ == "__main__":
    main()
