"""The peer: HF transformers Qwen2ForCausalLM (random init, same shapes), batched greedy `generate`."""

from __future__ import annotations

import gc
import time

import torch
from batching_common import Deadline, sync

# Qwen2.5-0.5B-Instruct's shapes; --small uses the tiny-qwen2-256 preset's.
FULL = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
            num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
            tie_word_embeddings=True)
SMALL = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, rope_theta=1e6,
             tie_word_embeddings=False)


def build_model(small: bool, device: torch.device, dtype: torch.dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(**(SMALL if small else FULL))
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(dtype).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None  # random weights: nothing may end a row early
    return model


def generate_round(model, c: int, prompt_len: int, gen_len: int, device: torch.device,
                   max_time: float | None, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (c, prompt_len), generator=g).to(device)
    mask = torch.ones_like(ids)
    sync(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=gen_len, min_new_tokens=gen_len,
                             do_sample=False, max_time=max_time)
    sync(device)
    wall = time.perf_counter() - t0
    new = out.shape[1] - prompt_len  # every row has the same length (no EOS)
    return {"concurrency": c, "wall_s": wall, "new_tokens_per_row": new, "tokens": c * new,
            "tok_s": c * new / wall, "truncated": new < gen_len}


def bench_hf(concurrency: list[int], prompt_len: int, gen_len: int, warmup_len: int, device: torch.device,
             small: bool, deadline: Deadline) -> dict:
    import transformers

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model(small, device, dtype)
    out: dict = {"transformers": transformers.__version__, "dtype": str(dtype).removeprefix("torch."),
                 "attn_implementation": getattr(model.config, "_attn_implementation", None), "rounds": {}}
    t0 = time.perf_counter()
    for c in concurrency:  # warm-up: cuBLAS/SDPA choices for every batch shape
        generate_round(model, c, prompt_len, warmup_len, device, None, seed=10_000 + c)
    out["warmup_s"] = time.perf_counter() - t0
    for c in concurrency:
        if deadline.remaining() < 1.0:
            out["rounds"][str(c)] = {"skipped": "time guard (--max-seconds)"}
            continue
        res = generate_round(model, c, prompt_len, gen_len, device, deadline.remaining(), seed=c)
        out["rounds"][str(c)] = res
        print(f"hf C={c}: {res['tok_s']:,.0f} tok/s, wall {res['wall_s']:.2f} s"
              + (" (cut short by the time guard)" if res["truncated"] else ""), flush=True)
    if device.type == "cuda":
        out["peak_device_MiB"] = torch.cuda.max_memory_allocated(device) / 2**20
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out
