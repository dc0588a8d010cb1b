"""Every pre-tokenizer name llama.cpp knows is supported by orcd or refused by name, and every split rule
that no llama.cpp test vocabulary covers splits text as the `tokenizers` pre-tokenizer built from the
regexes of the model family's own tokenizer.json."""

from __future__ import annotations

import pytest

from orcd.errors import TokenizerError
from orcd.tokenizer import load_tokenizer
from orcd.tokenizer.build import bytes_to_unicode, split_pre_tokenizer
from orcd.tokenizer.pretokenizers import GEMMA4_PRE, PRE_TOKENIZERS, REFUSED, split_rules

# the `tokenizer_pre == "..."` names of llama_vocab::impl::load in llama.cpp's src/llama-vocab.cpp, as
# vendored by llama-cpp-python 0.3.36 (the sdist orcd.testdata pins), in source order
LLAMA_CPP_VERSION = "llama-cpp-python 0.3.36"
LLAMA_CPP_PRE_NAMES = [
    "default", "minicpm5", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
    "lfm2", "jina-v5-nano", "deepseek-llm", "deepseek-coder", "deepseek-v3", "spark2_5", "youtu", "falcon",
    "mpt", "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
    "a.x-4.0", "mellum", "modern-bert", "jais-2", "gemma4", "granite-embed-multi-311m", "sarvam-moe",
    "jina-v1-en", "jina-v2-code", "roberta-bpe", "whitespace", "refact", "command-r", "qwen2",
    "deepseek-r1-qwen", "kormo", "f2llmv2", "qwen35", "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat",
    "chatglm-bpe", "glm4", "glm5", "viking", "jais", "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish",
    "exaone", "exaone4", "exaone-moe", "chameleon", "minerva-7b", "megrez", "gpt-4o", "llama4", "kanana2",
    "talkie", "granite-embed-multi-97m", "tiny_aya", "cohere2moe", "superbpe", "trillion", "granite-docling",
    "bailingmoe", "bailingmoe2", "llada-moe", "seed-coder", "hunyuan", "hunyuan-dense", "hy_v4", "joyai-llm",
    "kimi-k2", "ufakzeka", "grok-2", "afmoe", "laguna", "minimax-m2", "solar-open", "mellum2",
]
N_LLAMA_CPP_NAMES = 91


def _byte_alphabet_md(pre: str) -> dict:
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.merges": [],
            "tokenizer.ggml.tokens": sorted(bytes_to_unicode().values())}


def test_the_name_list_is_whole() -> None:
    assert len(LLAMA_CPP_PRE_NAMES) == len(set(LLAMA_CPP_PRE_NAMES)) == N_LLAMA_CPP_NAMES
    assert set(REFUSED) <= set(LLAMA_CPP_PRE_NAMES) and not set(REFUSED) & set(PRE_TOKENIZERS)
    assert not GEMMA4_PRE & (set(REFUSED) | set(PRE_TOKENIZERS))


@pytest.mark.parametrize("pre", LLAMA_CPP_PRE_NAMES)
def test_every_llama_cpp_name_is_supported_or_refused_by_name(pre: str) -> None:
    if pre in REFUSED:
        with pytest.raises(TokenizerError, match=f"unsupported tokenizer.ggml.pre '{pre}': "):
            load_tokenizer(_byte_alphabet_md(pre))
        return
    if pre in GEMMA4_PRE:  # read as tokenizer.ggml.model gemma4 (its vectors: test_vocab_cases.py)
        assert load_tokenizer(_byte_alphabet_md(pre)).vocab.model == "gemma4"
        return
    tok = load_tokenizer(_byte_alphabet_md(pre))  # byte alphabet, no merges: the rules compile, text survives
    text = "Hello, world!  123 ... naïve 東京\n\tx <sentinel:1>"
    assert tok.decode(tok.encode(text)) == text


def test_an_unknown_name_is_refused_by_name() -> None:
    with pytest.raises(TokenizerError, match="unknown tokenizer.ggml.pre 'mystery'"):
        split_rules("mystery")


# The Split regexes (in order) of each family's tokenizer.json, as the model ships them (case-insensitive
# groups, possessive quantifiers and all), for the rule sets no llama.cpp test vocabulary covers.
_O200K_HF = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
             r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
             r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DS3_HF = [r"\p{N}{1,3}", "[一-龥\u3040-ゟ゠-ヿ]+",
           r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
           r"""| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""]
_QWEN2_HF = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
HF_SPLITS: dict[str, list[str]] = {
    "gpt-4o": [_O200K_HF],  # o200k_base (gpt-4o, gpt-oss, Llama 4)
    "granite-embed-multi-97m": [_O200K_HF],
    "deepseek-v3": _DS3_HF,
    "spark2_5": [r"\p{N}{1,3}", "[一-龥\u3040-ゟ゠-ヿ]+",
                 r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
                 r"""| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+""", r"\p{N}"],
    "youtu": ["[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥\u3040-ゟ゠-ヿ]+",
              _O200K_HF.replace(r"\p{N}{1,3}", r"\p{N}")],
    "jais-2": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)"
               r"|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}"],
    "bloom": [" ?[^(\\s|.,!?…。，、।۔،)]+"],
    "viking": [" ?[^(\\s|.,!?…。，、।۔،)]+", r"\p{N}"],
    "tekken": [r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
               r"|[^\r\n\p{L}\p{N}]?"
               r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "chameleon": ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]",
                  r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"],
    "tiny_aya": [r"\d{1,3}(?=(?:\d{3})*\b)", _O200K_HF],
    "bailingmoe": [r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*"
                   r"|\s*[\r\n]|\s+(?!\S)|\s+"],
    "seed-coder": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "ufakzeka": [r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "grok-2": [_QWEN2_HF],
    "laguna": ["[^\\n]+|[\\n]+", _QWEN2_HF],
    "exaone-moe": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+"],
    "minicpm5": [r"\p{N}{1,3}", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}
SAMPLE = (
    "Hello World! It's 2024; we'LL see... They've DONE it, I'M sure; you'd've.\n"
    "CamelCaseWords and HTTPServer2Go, snake_case_name = value + 1234567 * 3.14159;\n\n\n"
    "   indented\tTAB\t\tline  with   spaces    \r\n"
    "naïve café résumé — “quotes” ‘single’ «guillemets» … ¡Olá! ¿Qué?\n"
    "東京と大阪、日本語のテキスト。カタカナ ひらがな 한국어 텍스트입니다 中文，标点！\n"
    "हिन्दी पाठ नमस्ते, বাংলা লেখা, ภาษาไทย, العربية، ١٢٣ ۔ Ελληνικά Русский\n"
    "emoji 🦙🚀 x² ½ ① $100,000.00 50% a/b c\\d <tag attr=\"v\"/> {json: [1, 2]}\n"
    "<sentinel:12> IMGIMGABCZ x  y    z\n"
    "\n  \n"
)


@pytest.mark.parametrize("pre", sorted(HF_SPLITS))
def test_split_rules_match_the_model_tokenizer_json(pre: str) -> None:
    ours = split_pre_tokenizer(split_rules(pre)).pre_tokenize_str(SAMPLE)
    theirs = split_pre_tokenizer(HF_SPLITS[pre]).pre_tokenize_str(SAMPLE)
    assert [p for p, _ in ours] == [p for p, _ in theirs]
    assert "".join(p for p, _ in ours) == SAMPLE
