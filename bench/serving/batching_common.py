"""Shared pieces of batching.py: time guard, device sync, prompts, phase splitting."""

from __future__ import annotations

import importlib
import random
import time
from dataclasses import dataclass

import torch

# Modules each phase imports (in this process or in the `orcd serve` child); checked up front.
NEEDS = {
    "engine": ["numpy", "gguf", "tokenizers", "jinja2"],
    "http": ["fastapi", "uvicorn", "pydantic", "starlette", "anyio", "httpx", "prometheus_client"],
    "hf": ["transformers", "safetensors"],
}
SKIP_FLAG = {"http": "--skip-http", "hf": "--skip-hf"}


def missing_modules(phases: list[str]) -> list[str]:
    """One line per phase that lacks a module: 'http: httpx, uvicorn (pass --skip-http to leave it out)'."""
    lines = []
    for phase in phases:
        gone = []
        for mod in NEEDS[phase]:
            try:
                importlib.import_module(mod)
            except ImportError:
                gone.append(mod)
        if gone:
            hint = f" (pass {SKIP_FLAG[phase]} to leave it out)" if phase in SKIP_FLAG else ""
            lines.append(f"{phase}: {', '.join(gone)}{hint}")
    return lines


@dataclass
class Deadline:
    """An absolute time.perf_counter() instant; phases stop (and say so) when it passes."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.perf_counter() + seconds)

    def remaining(self) -> float:
        return self.at - time.perf_counter()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def share(self, fraction: float) -> Deadline:
        """A deadline `fraction` of the way from now to this one."""
        now = time.perf_counter()
        return Deadline(now + max(0.0, self.at - now) * fraction)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prompt_ids(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """n distinct random prompts of `length` ids in [0, vocab): distinct first blocks, so no prefix hits."""
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(n)]


def prompt_texts(tokenizer, n: int, length: int, seed: int) -> list[str]:
    """n distinct texts of about `length` tokens (random words, cut at `length` tokens and decoded back)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    texts = []
    for i in range(n):
        words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(length)]
        ids = tokenizer.encode(f"Request {seed}-{i}: " + " ".join(words))[:length]
        texts.append(tokenizer.decode(ids))
    return texts


def split_phases(t0: float, first: list[float], stamps: list[tuple[float, int]], t_end: float) -> dict:
    """Prefill/decode split of one round.

    t0: start (before any request was added/sent); first: per-request time of its first token;
    stamps: (time, tokens that arrived then); t_end: when the last token arrived.
    The decode phase runs from the moment every request has its first token to t_end: only tokens that
    arrive strictly after that moment count for decode tok/s, so prefill (and decodes that overlap other
    requests' prefill chunks) stay out of it.
    """
    all_first = max(first) if first else t_end
    total = sum(n for _, n in stamps)
    decode_tokens = sum(n for t, n in stamps if t > all_first)
    decode_s = t_end - all_first
    wall = t_end - t0
    return {
        "tokens": total,
        "wall_s": wall,
        "e2e_tok_s": total / wall if wall > 0 else None,
        "prefill_phase_s": all_first - t0,
        "ttft_mean_s": sum(f - t0 for f in first) / len(first) if first else None,
        "decode_tokens": decode_tokens,
        "decode_s": decode_s,
        "decode_tok_s": decode_tokens / decode_s if decode_s > 0 else None,
    }
