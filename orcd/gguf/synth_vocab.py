"""A synthetic but valid byte-level BPE ("gpt2"-model) vocabulary as GGUF tokenizer metadata.

Layout of `vocab_size` ids: 256 byte tokens (GPT-2 byte-to-unicode order), then merged tokens built from
earlier ones (each with its merge rule, so the BPE is consistent), then the special tokens at the end.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TOKEN_NORMAL, TOKEN_CONTROL = 1, 3

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role']"
    " + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
HARMONY_TEMPLATE = (  # the shape of gpt-oss's Harmony turns, without its system/developer/tool parts
    "{% for message in messages %}{{ '<|start|>' + message['role'] + '<|message|>' + message['content']"
    " + '<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start|>assistant' }}{% endif %}"
)

# arch -> (pre-tokenizer, special tokens, bos, eos, extra end-of-turn, add_bos, template)
_STYLES: dict[str, tuple[str, list[str], str, str, str | None, bool, str]] = {
    "qwen2": ("qwen2", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              "<|endoftext|>", "<|im_end|>", None, False, CHATML_TEMPLATE),
    "llama": ("llama-bpe", ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                            "<|end_header_id|>", "<|eot_id|>"],
              "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", True, LLAMA3_TEMPLATE),
    # o200k_harmony's pre-tokenizer and special tokens (real ids differ: 200k vocabulary)
    "gpt-oss": ("gpt-4o", ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
                          "<|start|>", "<|end|>", "<|message|>", "<|call|>"],
                "<|startoftext|>", "<|return|>", None, False, HARMONY_TEMPLATE),
}


def byte_tokens() -> list[str]:
    """GPT-2's reversible byte -> printable unicode character mapping, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def _merged_tokens(n: int, seed: int) -> tuple[list[str], list[str]]:
    """n new tokens and their merge rules, each the concatenation of two earlier tokens."""
    rng = np.random.default_rng(seed)
    base = byte_tokens()
    # Favour letters and the space marker so the vocabulary looks a little like text.
    common = [c for c in base if c.isalpha() and c.isascii()] + ["Ġ"] * 8
    pool, seen, merges = list(common), set(base), []
    new: list[str] = []
    while len(new) < n:
        idx = (rng.random((2, 4096)) ** 2 * len(pool)).astype(np.int64)  # bias to early, short tokens
        for a, b in zip(pool_pick(pool, idx[0]), pool_pick(pool, idx[1]), strict=True):
            tok = a + b
            if tok in seen or len(tok) > 16:
                continue
            seen.add(tok)
            pool.append(tok)
            new.append(tok)
            merges.append(f"{a} {b}")
            if len(new) == n:
                break
    return new, merges


def pool_pick(pool: list[str], idx: np.ndarray) -> list[str]:
    return [pool[i] for i in idx.tolist()]


def synthetic_tokenizer_metadata(vocab_size: int, arch: str = "qwen2", seed: int = 0) -> dict[str, Any]:
    """GGUF `tokenizer.*` keys (plain Python values) for a vocabulary of exactly `vocab_size` tokens."""
    pre, specials, bos, eos, eot, add_bos, template = _STYLES.get(arch, _STYLES["qwen2"])
    n_merged = vocab_size - 256 - len(specials)
    if n_merged < 0:
        raise ValueError(f"vocab_size must be at least {256 + len(specials)} for a byte-level vocabulary")
    merged, merges = _merged_tokens(n_merged, seed)
    tokens = byte_tokens() + merged + specials
    types = [TOKEN_NORMAL] * (256 + n_merged) + [TOKEN_CONTROL] * len(specials)
    md: dict[str, Any] = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": tokens.index(bos),
        "tokenizer.ggml.eos_token_id": tokens.index(eos),
        "tokenizer.ggml.padding_token_id": tokens.index(specials[0]),
        "tokenizer.ggml.add_bos_token": add_bos,
        "tokenizer.chat_template": template,
    }
    if eot is not None:
        md["tokenizer.ggml.eot_token_id"] = tokens.index(eot)
    return md
