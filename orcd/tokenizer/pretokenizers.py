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
# DeepSeek V3 (and Hunyuan dense, JoyAI, HY v4): digits in threes, CJK/kana runs, then words
_CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
_DS3_PUNCT_WORD = r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
_DEEPSEEK3 = [r"\p{N}{1,3}", _CJK_KANA,
              _DS3_PUNCT_WORD + r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]
_SPARK2_5 = [r"\p{N}{1,3}", _CJK_KANA, _DS3_PUNCT_WORD + r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"]
# o200k-style words (case changes split words) with a digit rule; `(?i:...)` contractions as tokenizer.json
_UP, _LOW = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_O200K_WORDS = (r"[^\r\n\p{L}\p{N}]?" + _UP + "*" + _LOW + "+" + _GPT4O_CASED
                + r"|[^\r\n\p{L}\p{N}]?" + _UP + "+" + _LOW + "*" + _GPT4O_CASED)
_O200K_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_YOUTU = ["[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
          "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|" + _CJK_KANA,
          _O200K_WORDS + r"|\p{N}" + _O200K_TAIL]
# Mistral's tekken: o200k's word rule without contractions, single digits
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?" + _UP + "*" + _LOW + "+"
           r"|[^\r\n\p{L}\p{N}]?" + _UP + "+" + _LOW + r"*|\p{N}" + _O200K_TAIL)
_TINY_AYA = [r"\d{1,3}(?=(?:\d{3})*\b)", _O200K_WORDS + r"|\p{N}{1,3}" + _O200K_TAIL]
_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
_JAIS2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)"
          r"|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}")
_MINICPM5 = [r"\p{N}{1,3}", _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+"]
_CHAMELEON = ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", r"\p{N}",
              r"[\p{P}!-/:-@\[-`{-~]", _GPT2]
_BAILINGMOE = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
_SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
# Turkish: Qwen 2's split without the English contractions (apostrophe suffixes stay on the word)
_UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_EXAONE_MOE = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
_LINES = "[^\\n]+|[\\n]+"


def _group(rules: list[str], *names: str) -> dict[str, list[str]]:
    return dict.fromkeys(names, rules)


# name -> split rules, grouped as llama.cpp groups the names into LLAMA_VOCAB_PRE_TYPE_*
PRE_TOKENIZERS: dict[str, list[str]] = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
    **_group([_GPT2], "gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
             "a.x-4.0", "mellum", "modern-bert", "exaone4", "jina-v1-en", "jina-v2-code", "roberta-bpe",
             "mpt", "olmo", "gpt-neox", "jais", "trillion", "granite-docling"),
    **_group([_LLAMA3], "llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
             "lfm2", "jina-v5-nano", "dbrx", "smaug-bpe", "chatglm-bpe", "glm4", "glm5"),
    **_group([_QWEN2], "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
             "solar-open", "grok-2"),
    "qwen35": [_QWEN35],
    **_group([_GPT4O], "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2", "granite-embed-multi-97m"),
    "deepseek-llm": [
        r"[\r\n]",
        r"\s?[" + _DEEPSEEK_LETTERS + "]+",
        r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
        r"\s+$",
        _CJK,
        r"\p{N}+",
    ],
    "deepseek-coder": [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"],
    **_group(_DEEPSEEK3, "deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"),
    "spark2_5": _SPARK2_5,
    "youtu": _YOUTU,
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"],
    **_group(_STARCODER, "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
             "mellum2"),
    "jais-2": [_JAIS2],
    **_group([_BLOOM], "poro-chat", "bloom", "gpt3-finnish"),
    "viking": [_BLOOM, r"\p{N}"],
    "tekken": [_TEKKEN],
    "chameleon": _CHAMELEON,
    **_group(_TINY_AYA, "tiny_aya", "cohere2moe"),
    **_group([_BAILINGMOE], "bailingmoe", "bailingmoe2", "llada-moe"),
    "seed-coder": [_SEED_CODER],
    "ufakzeka": [_UFAKZEKA],
    "laguna": [_LINES, _QWEN2],
    "exaone-moe": [_EXAONE_MOE],
    "minicpm5": _MINICPM5,
}

# Names llama.cpp knows that orcd refuses (by name, with the reason): they need more than a split rule.
_RAW_UTF8 = "BPE on raw UTF-8 with '▁' for spaces without Gemma 4's newline rule, not implemented in orcd"
# Names llama.cpp tokenizes as Gemma 4 (LLAMA_VOCAB_PRE_TYPE_GEMMA4) with tokenizer.ggml.model gpt2: orcd then
# reads the file as tokenizer.ggml.model gemma4 (vocab.py).
GEMMA4_PRE = frozenset({"gemma4", "granite-embed-multi-311m"})
REFUSED: dict[str, str] = {
    "sarvam-moe": _RAW_UTF8 + " (Gemma 4's variant is: tokenizer.ggml.pre gemma4)",
    "whitespace": "whitespace split over raw UTF-8 BPE (jina-embeddings-v2-base-zh), not implemented in orcd",
    "kimi-k2": "Kimi-K2's custom split (llama.cpp special-cases it in code), not implemented in orcd",
    "afmoe": "AFMoE's digit grouping (llama.cpp special-cases it in code), not implemented in orcd",
    "superbpe": "SuperBPE's zero-width digit split, not implemented in orcd",
}

# Names llama.cpp gives add_bos = true by default (the file's tokenizer.ggml.add_bos_token still wins).
ADD_BOS = frozenset({"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                     "jina-v5-nano", "tekken", "chameleon"})

# Pre-tokenizers whose whole-word vocabulary hits skip the merges (llama.cpp `ignore_merges`).
IGNORE_MERGES = frozenset({"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                           "lfm2", "jina-v5-nano", "minicpm5", "youtu", "glm4", "glm5", "tekken",
                           "granite-embed-multi-97m"})


def split_rules(pre: str) -> list[str]:
    """Regexes for pre-tokenizer `pre`; TokenizerError naming it when orcd does not know it."""
    rules = PRE_TOKENIZERS.get(pre)
    if rules is not None:
        return rules
    if pre in REFUSED:
        raise TokenizerError(f"unsupported tokenizer.ggml.pre {pre!r}: {REFUSED[pre]}")
    raise TokenizerError(f"unknown tokenizer.ggml.pre {pre!r} (llama.cpp's names are supported, see "
                         "orcd/tokenizer/pretokenizers.py)")
