"""The gpt-oss fused decode step (orcd/runner/fused_gpt_oss.py) on the CPU under TRITON_INTERPRET=1 (run by
test_gpt_oss_fused.py): the tiny file of test_gpt_oss.py with MXFP4 experts and the rest Q8_0 (kept raw, as
on the GPU), 2 layers (one local, one global), fp32. The cache holds random K/V for sequences of different
lengths (most past the 8-token window); one decode step runs both ways: the fused step's logits (Triton
kernels, attention included) against `model.forward` + `compute_logits` (whose attention is the torch
reference on the CPU). A batch of 2 rows takes the norm-fused path,
6 rows the unfused-norm one. Prints `name rel-err tol` per batch.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models_helpers import rel_err  # noqa: E402
from test_gpt_oss import DIMS as GPT_OSS_DIMS  # noqa: E402

from orcd.gguf.synth_gpt_oss import write_gpt_oss_gguf  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.models.layers.attention import AttnMetadata  # noqa: E402
from orcd.runner.decode_graphs import pick_step  # noqa: E402
from orcd.runner.fused_gpt_oss import GptOssDecoder  # noqa: E402
from orcd.runner.model_runner import ModelRunner  # noqa: E402

BLOCK, BLOCKS, WIDTH = 4, 96, 10  # scratch block: BLOCKS - 1, never handed to a sequence
BATCHES = (2, 6)  # the norm-fused path (<= GEMV_MAX_N rows), the unfused-norm one (interpreted: slow)
LENS = [19, 3, 30, 9, 12, 1]  # context lengths: 19, 30, 9 and 12 cross the 8-token window
DIMS = GPT_OSS_DIMS | dict(n_layers=2)  # a local and a global layer (fewer interpreted programs)


def fill_cache(kv, lens: list[int]) -> list[tuple[int, list[int]]]:
    """Random K/V in every cache slot (the context of each sequence: the decode step reads it, whatever
    wrote it) -> [(context length, block table)], tables interleaved across sequences."""
    g = torch.Generator().manual_seed(3)
    for t in (*kv.k, *kv.v):
        t.copy_(torch.randn(t.shape, generator=g))  # on the CPU, then copied: the same on every device
    tables: list[list[int]] = [[] for _ in lens]
    nxt = 0
    for j in range(max(lens) // BLOCK + 1):  # room for the decoded token
        for n, t in zip(lens, tables, strict=True):
            if j <= n // BLOCK:
                t.append(nxt)
                nxt += 1
    return list(zip(lens, tables, strict=True))


def step_inputs(seqs: list[tuple[int, list[int]]]) -> tuple[torch.Tensor, ...]:
    """ids, pos, slots [B], seq_lens [B] int32, tables [B, WIDTH] int32 of one decode step."""
    ids = torch.tensor([(7 * i + 5) % DIMS["vocab_size"] for i in range(len(seqs))])
    pos = torch.tensor([n for n, _ in seqs])
    slots = torch.tensor([t[n // BLOCK] * BLOCK + n % BLOCK for n, t in seqs])
    tables = torch.full((len(seqs), WIDTH), BLOCKS - 1, dtype=torch.int32)
    for i, (_, t) in enumerate(seqs):
        tables[i, : len(t)] = torch.tensor(t, dtype=torch.int32)
    return ids, pos, slots, (pos + 1).to(torch.int32), tables


def decode_step(step, model, kv, inputs) -> torch.Tensor:
    """One decode step: step(ids, pos, meta, kv) (the fused one), or model.forward + compute_logits."""
    ids, pos, slots, seq_lens, tables = inputs
    b = ids.shape[0]
    meta = AttnMetadata(cu_seqlens_q=torch.arange(b + 1, dtype=torch.int32), seq_lens=seq_lens,
                        block_tables=tables, slot_mapping=slots, max_query_len=1, max_seq_len=WIDTH * BLOCK)
    if step is not None:
        return step(ids, pos, meta, kv)
    return model.compute_logits(model(ids, pos, meta, kv))


def setup(device: str, dtype: torch.dtype):
    """(model, kv cache, [(context length, block table)]) on the tiny file, the cache filled."""
    with tempfile.TemporaryDirectory() as d:
        path = write_gpt_oss_gguf(Path(d) / "tiny.gguf", seed=5, **DIMS)  # MXFP4 experts, Q8_0 rest
        loaded = load_model(path, device=device, dtype=dtype, tokenizer=False, keep_quantized=True)
    runner = ModelRunner(loaded, num_kv_blocks=BLOCKS, block_size=BLOCK)
    model = runner.model
    assert model.blocks[0].moe.fused() and model.blocks[0].attn.q_proj.raw is not None
    return model, runner.kv, fill_cache(runner.kv, LENS)


def main() -> None:
    torch.set_num_threads(1)
    model, kv, seqs = setup("cpu", torch.float32)
    fused = pick_step(model)  # the runner's choice for this model
    assert isinstance(fused, GptOssDecoder), fused
    for b in BATCHES:
        inputs = step_inputs(seqs[:b])
        ref = decode_step(None, model, kv, inputs)  # both write the same K/V at the step's slots
        got = decode_step(fused, model, kv, inputs)
        print(f"fused-step-b{b} {rel_err(got, ref):.3e} 1e-4")
    # q|k|v as one product (on CUDA where mmq_legacy takes it; here forced), at 6 rows (above GEMV_MAX_N)
    merged = GptOssDecoder(model, merged_qkv=True)
    assert fused.qkv == [None] * len(model.blocks) and all(m is not None for m in merged.qkv)
    inputs = step_inputs(seqs[:6])
    ref = decode_step(None, model, kv, inputs)
    print(f"fused-step-merged-b6 {rel_err(decode_step(merged, model, kv, inputs), ref):.3e} 1e-4")


if __name__ == "__main__":
    main()
