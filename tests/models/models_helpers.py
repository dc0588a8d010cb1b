"""Shared by the model tests: tiny GGUF cases, the HF reference, and a paged greedy generation driver."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as Q

from orcd.engine.io import ScheduledSeq, SchedulerOutput
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.runner.model_runner import ModelRunner

TINY = dict(vocab_size=320, hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2)
KQUANT = dict(vocab_size=512, hidden=256, n_layers=2, ffn=512, n_heads=4, n_kv_heads=2)
# Q4_K_M-like mix: K-quants where rows allow, Q5_0/Q8_0 elsewhere, Q8_0 embeddings.
KQUANT_TYPES = {"token_embd": Q.Q8_0, "attn_q": Q.Q4_K, "attn_k": Q.Q5_0, "attn_v": Q.Q6_K,
                "attn_output": Q.Q5_K, "ffn_gate": Q.Q4_K, "ffn_up": Q.Q8_0, "ffn_down": Q.Q6_K,
                "output.weight": Q.Q6_K}

# name -> (arch, tied, dims, qtypes)
CASES = {
    "qwen2-tied-f32": ("qwen2", True, TINY, {"default": Q.F32}),
    "qwen2-untied-f16": ("qwen2", False, TINY, {"default": Q.F16}),
    "llama-untied-q8_0": ("llama", False, TINY, {"default": Q.Q8_0}),
    "llama-tied-f32": ("llama", True, TINY, {"default": Q.F32}),
    "qwen2-untied-kquant-mix": ("qwen2", False, KQUANT, KQUANT_TYPES),
}

PROMPTS = [[7, 100, 42, 3, 250, 11, 19, 64, 5], [1, 2], [300, 12, 77, 77, 77, 9, 180, 31, 2, 8, 15, 260, 4]]


def write_case(directory: Path, name: str, seed: int = 0) -> Path:
    arch, tied, dims, qtypes = CASES[name]
    return write_model_gguf(directory / f"{name}.gguf", arch, tied=tied, qtypes=qtypes, seed=seed, **dims)


def hf_model(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()


@torch.no_grad()
def hf_last_logits(hf, ids: list[int]) -> torch.Tensor:
    return hf(torch.tensor([ids])).logits[0, -1].float()


@torch.no_grad()
def hf_greedy(hf, ids: list[int], n: int) -> list[int]:
    out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                      max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(ids):].tolist()


@dataclass
class _Seq:
    seq_id: int
    tokens: list[int]
    prompt_len: int
    chunk: int
    blocks: list[int] = field(default_factory=list)
    computed: int = 0


def paged_greedy(runner: ModelRunner, prompts: list[list[int]], n_new: int,
                 chunks: list[int]) -> list[list[int]]:
    """Greedy-generate n_new tokens for every prompt at once through runner.execute.

    Each step, sequence i computes up to chunks[i] of its not-yet-cached tokens, so long prompts are
    prefilled in chunks while others decode (mixed batches). Blocks are handed out in step order,
    so each sequence's blocks are interleaved with the others' (non-contiguous).
    """
    bs = runner.block_size
    free = list(range(runner.kv.num_blocks))
    seqs = [_Seq(i, list(p), len(p), c) for i, (p, c) in enumerate(zip(prompts, chunks, strict=True))]
    greedy = SamplingParams(temperature=0.0)
    while any(len(s.tokens) - s.prompt_len < n_new for s in seqs):
        batch = []
        for s in seqs:
            if len(s.tokens) - s.prompt_len >= n_new:
                continue
            new = s.tokens[s.computed : s.computed + s.chunk]
            end = s.computed + len(new)
            while len(s.blocks) * bs < end:
                s.blocks.append(free.pop(0))
            last = end == len(s.tokens)
            batch.append(ScheduledSeq(s.seq_id, new, s.computed, list(s.blocks), last, greedy))
        out = runner.execute(SchedulerOutput(batch, sum(len(b.token_ids) for b in batch)))
        assert not out.failed, out.failed
        for b in batch:
            s = seqs[b.seq_id]
            s.computed += len(b.token_ids)
            if b.sample:
                s.tokens.append(out.sampled[b.seq_id])
    return [s.tokens[s.prompt_len :] for s in seqs]


def orcd_last_logits(runner: ModelRunner, ids: list[int]) -> torch.Tensor:
    n_blocks = -(-len(ids) // runner.block_size)
    seq = ScheduledSeq(0, ids, 0, list(range(n_blocks)), True, SamplingParams(temperature=0.0))
    return runner.forward(SchedulerOutput([seq], len(ids)))[0]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def check_last_logits_match_hf(runner, hf, prompts: list[list[int]], tol: float = 1e-4) -> None:
    """Each prompt alone: orcd's last-position logits within `tol` (relative) of the HF model's."""
    for ids in prompts:
        assert rel_err(orcd_last_logits(runner, ids), hf_last_logits(hf, ids)) < tol


def check_greedy_batch_matches_hf(runner, hf, prompts: list[list[int]], n_new: int) -> None:
    """The prompts at once, the last one prefilled in 5-token chunks while the others decode: every
    greedy continuation equals the HF model's."""
    chunks = [len(p) for p in prompts[:-1]] + [5]
    got = paged_greedy(runner, prompts, n_new, chunks)
    for ids, tokens in zip(prompts, got, strict=True):
        assert tokens == hf_greedy(hf, ids, n_new)
