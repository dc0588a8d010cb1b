"""Pre-tokenizer split rules per `tokenizer.ggml.pre`, as llama.cpp applies them.

Each entry is a list of regexes applied in order: every regex splits each piece left by the previous
one into matches and the unmatched text between them (both kept, like tokenizers' "isolated" Split).
Written after llama.cpp's llama-vocab.cpp (the `regex_exprs` per LLAMA_VOCAB_PRE_TYPE_*).
An unknown name raises TokenizerError: a guessed pre-tokenizer silently gives wrong ids.
"""

from __future__ import annotations

from orcd.errors import TokenizerError

# GPT-2's split, without the trailing `|\s+` alternative (unmatched text is kept as its own piece anyway)
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# Llama 3 / Qwen 2 style; the case-insensitive contractions are spelled out as llama.cpp does
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen 3.5: Qwen 2's split with combining marks (\p{M}) kept inside words
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# o200k (gpt-4o, gpt-oss): tokenizer.json's regex as is (llama.cpp rewrites the cased-letter classes for its
# own regex engine); words split at lower->upper case changes, digits in threes, no space before digits
_GPT4O_CASED = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _GPT4O_CASED
          + r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _GPT4O_CASED
          + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CJK = "[一-龥ࠀ-一가-퟿]+"
# deepseek-llm's cased-letter class (from its tokenizer.json); \u escapes where NFC would alter the char
_DEEPSEEK_LETTERS = (
    "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝ"
    "\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb"
    "\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffcℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎ"
    "ꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃"
)

_STARCODER = [r"\p{N}", _GPT2]

PRE_TOKENIZERS: dict[str, list[str]] = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
    "gpt-2": [_GPT2],
    "gpt2": [_GPT2],
    "phi-2": [_GPT2],
    "mpt": [_GPT2],
    "olmo": [_GPT2],
    "gpt-neox": [_GPT2],
    "llama-bpe": [_LLAMA3],
    "llama3": [_LLAMA3],
    "llama-v3": [_LLAMA3],
    "dbrx": [_LLAMA3],
    "smaug-bpe": [_LLAMA3],
    "qwen2": [_QWEN2],
    "stablelm2": [_QWEN2],
    "qwen35": [_QWEN35],
    "gpt-4o": [_GPT4O],
    "deepseek-llm": [
        r"[\r\n]",
        r"\s?[" + _DEEPSEEK_LETTERS + "]+",
        r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
        r"\s+$",
        _CJK,
        r"\p{N}+",
    ],
    "deepseek-coder": [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"],
    "starcoder": _STARCODER,
    "refact": _STARCODER,
    "smollm": _STARCODER,
    "command-r": _STARCODER,
}

# Pre-tokenizers whose whole-word vocabulary hits skip the merges (llama.cpp `ignore_merges`).
IGNORE_MERGES = frozenset({"llama-bpe", "llama3", "llama-v3"})


def split_rules(pre: str) -> list[str]:
    """Regexes for pre-tokenizer `pre`; TokenizerError naming it when orcd does not know it."""
    try:
        return PRE_TOKENIZERS[pre]
    except KeyError:
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise TokenizerError(f"unknown tokenizer.ggml.pre {pre!r} (known: {known})") from None
