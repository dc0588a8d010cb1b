"""`tokenizer.ggml.*` metadata -> a checked Vocab (tokens, types, special ids), as llama.cpp reads it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

from orcd.errors import TokenizerError
from orcd.tokenizer.pretokenizers import ADD_BOS, GEMMA4_PRE

# llama.cpp token types (gguf TokenType)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Token texts llama.cpp treats as end-of-generation (and forces to CONTROL), from llama-vocab.cpp.
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
             "<|return|>", "<|call|>",  # gpt-oss's Harmony (o200k_harmony)
             "<eos>", "<turn|>", "<|tool_response>")  # Gemma 4
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
              "<｜end▁of▁sentence｜>")
# Harmony markup llama.cpp turns into user-defined tokens, so detokenizing never drops it (gpt-oss's
# channels stay visible to a reasoning parser); Mistral's tool-call markers likewise (llama.cpp keeps them
# in the text as "preserved tokens"), so orcd.server.tool_scanners sees where calls start
_ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", "[TOOL_CALLS]", "[ARGS]",
                    "[CALL_ID]")
_SPECIAL_ID_KEYS = ("bos", "eos", "eot", "eom", "unknown", "seperator", "padding")
log = logging.getLogger("orcd.tokenizer")
# tokenizer.ggml.model values llama.cpp knows (llama-vocab.cpp) that orcd refuses, and why
REFUSED_MODELS = {
    "bert": "WordPiece (BERT-style encoders), not implemented in orcd",
    "t5": "Unigram (T5), not implemented in orcd",
    "rwkv": "RWKV's trie tokenizer, not implemented in orcd",
    "plamo2": "PLaMo-2's tokenizer, not implemented in orcd",
    "hybriddna": "HybriDNA's k-mer tokenizer, not implemented in orcd",
    "whitespace": "whitespace-split BPE over raw UTF-8, not implemented in orcd",
    "no_vocab": "the file has no vocabulary", "none": "the file has no vocabulary",
    "test": "llama.cpp's test tokenizer",
}
_MAX_TOKENS = 1 << 22  # 4M tokens: far above any real vocabulary, bounds what a hostile file can ask


@dataclass(frozen=True)
class Vocab:
    model: str  # "gpt2" (byte-level BPE) | "llama" (SentencePiece BPE) | "gemma4" (BPE on '▁'-escaped UTF-8)
    pre: str
    tokens: list[str]
    types: list[int]  # one of the constants above per token
    scores: list[float] | None
    merges: list[tuple[str, str]]  # gpt2 only; GGUFTokenizer.vocab has none (its `tokenizers` model does)
    special: dict[str, int]  # "bos", "eos", "eot", ... -> id (only those present)
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    eog_ids: frozenset[int]
    rstrip_ids: frozenset[int]  # special tokens that eat the whitespace after them (phi-3)
    chat_template: str | None
    index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)  # token text -> id


def _list(md: dict[str, Any], key: str, n: int | None = None) -> list | None:
    value = md.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise TokenizerError(f"metadata {key} is not an array")
    if n is not None and len(value) != n:
        raise TokenizerError(f"metadata {key} has {len(value)} entries, expected {n}")
    return value


def _special_ids(md: dict[str, Any], model: str, n: int) -> dict[str, int]:
    # SentencePiece defaults when the file names none: bos=1 eos=2 unk=0 (as llama.cpp). llama.cpp also
    # defaults BPE bos=eos=11, an arbitrary token that would end generation: orcd leaves those unset.
    special = {"bos": 1, "eos": 2, "unknown": 0} if model == "llama" else {}
    for name in _SPECIAL_ID_KEYS:
        value = md.get(f"tokenizer.ggml.{name}_token_id")
        if isinstance(value, int) and 0 <= value < n:
            special[name] = value
    return {k: v for k, v in special.items() if 0 <= v < n}


def _merges(md: dict[str, Any]) -> list[tuple[str, str]]:
    """"a b" -> ("a", "b"), split at the first space after the first char (as llama.cpp)."""
    raw = _list(md, "tokenizer.ggml.merges")
    if raw is None:
        raise TokenizerError("gpt2 tokenizer without tokenizer.ggml.merges")
    if set(map(type, raw)) == {str}:  # fast path (~150k merges): C-level loops only
        parts = list(map(str.partition, raw, repeat(" ")))
        lefts = list(map(itemgetter(0), parts))
        if "" not in lefts and "" not in map(itemgetter(1), parts):  # a space after char 0: find(" ", 1)
            return list(zip(lefts, map(itemgetter(2), parts), strict=True))
    merges = []
    for m in raw:
        pos = m.find(" ", 1) if isinstance(m, str) else -1
        if pos < 0:
            raise TokenizerError(f"malformed merge {m!r} in tokenizer.ggml.merges")
        merges.append((m[:pos], m[pos + 1:]))
    return merges


def read_vocab(md: dict[str, Any]) -> Vocab:
    """Check and collect the tokenizer metadata; TokenizerError with one line on anything unusable."""
    model = md.get("tokenizer.ggml.model")
    if model == "gpt2" and md.get("tokenizer.ggml.pre") in GEMMA4_PRE:
        model = "gemma4"  # llama.cpp's Gemma 4 pre-tokenizer: no byte-level encoding, '▁' for spaces
    if model not in ("gpt2", "llama", "gemma4"):
        why = f": {REFUSED_MODELS[model]}" if isinstance(model, str) and model in REFUSED_MODELS else ""
        raise TokenizerError(f"unsupported tokenizer.ggml.model {model!r}{why} "
                             "(orcd supports gpt2, llama, gemma4)")
    tokens = _list(md, "tokenizer.ggml.tokens")
    if not tokens or len(tokens) > _MAX_TOKENS or set(map(type, tokens)) != {str}:
        raise TokenizerError("tokenizer.ggml.tokens is missing, empty, too long or not all strings")
    n = len(tokens)
    if "" in tokens:
        tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    index = dict(zip(tokens, range(n), strict=True))
    if len(index) != n:
        raise TokenizerError("tokenizer.ggml.tokens holds duplicate token texts")
    types = list(_list(md, "tokenizer.ggml.token_type", n) or [NORMAL] * n)
    scores = _list(md, "tokenizer.ggml.scores", n)
    if model == "llama" and scores is None:
        raise TokenizerError("llama tokenizer without tokenizer.ggml.scores")
    pre = md.get("tokenizer.ggml.pre") if model == "gpt2" else "gemma4" if model == "gemma4" else "default"
    if pre is None:
        log.warning("GGUF has no tokenizer.ggml.pre: using llama.cpp's 'default' split rules; ids may "
                    "differ from the model's training tokenizer (regenerate the GGUF to fix)")
        pre = "default"
    special = _special_ids(md, model, n)
    by_text = {index[t] for t in EOG_TEXTS if t in index}
    if "eot" not in special:
        eot = next((index[t] for t in _EOT_TEXTS if t in index), None)
        if eot is not None:
            special["eot"] = eot
            by_text.add(eot)
    for i in by_text:
        types[i] = CONTROL  # llama.cpp forces end-of-generation-looking tokens to control type
    eog = by_text | {special[k] for k in ("eos", "eot", "eom") if k in special}
    if "<|return|>" in index and "<|call|>" in index:  # Harmony, as llama.cpp: <|end|> ends a message only
        eog.discard(index.get("<|end|>", -1))
    for t in _ALWAYS_RENDERED:
        if t in index:
            types[index[t]] = USER_DEFINED
    add_bos = model == "llama" or pre in ADD_BOS
    # llama.cpp forces BOS on for Gemma 4
    add_bos = bool(md.get("tokenizer.ggml.add_bos_token", add_bos)) or model == "gemma4"
    add_eos = bool(md.get("tokenizer.ggml.add_eos_token", False))
    add_space_prefix = bool(md.get("tokenizer.ggml.add_space_prefix", model == "llama"))
    rstrip: set[int] = set()
    name = str(md.get("general.name", "")).lower()
    if "phi-3" in name or "phi3" in name:  # llama.cpp's per-model attribute fix-up
        rstrip = {i for i, t in enumerate(types) if t in (CONTROL, USER_DEFINED, UNKNOWN)}
        rstrip |= {index["</s>"]} if "</s>" in index else set()
        rstrip -= {index[t] for t in ("<unk>", "<s>", "<|endoftext|>") if t in index}
    template = md.get("tokenizer.chat_template")
    return Vocab(
        model=model, pre=str(pre), tokens=tokens, types=types, scores=scores,
        merges=_merges(md) if model in ("gpt2", "gemma4") else [], special=special, add_bos=add_bos,
        add_eos=add_eos, add_space_prefix=add_space_prefix, eog_ids=frozenset(eog),
        rstrip_ids=frozenset(rstrip), chat_template=template if isinstance(template, str) else None,
        index=index,
    )
