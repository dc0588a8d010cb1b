"""orcd.server.reasoning: `<think>` and Harmony output split into reasoning_content / content, whole and
in arbitrary deltas (tags cut anywhere); which models get which splitter; the chat stream's deltas."""

from __future__ import annotations

import asyncio
import json
import random
import types

import pytest

from orcd.engine.io import TokenEvent
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.server.openai_stream import ChoiceFormat, stream_choices
from orcd.server.reasoning import HarmonySplitter, ThinkSplitter, joined, split_all, splitter_for
from orcd.tokenizer import load_tokenizer

THINKING = "<think>\nThe user greets me. I greet back.\n</think>\n\nHello! <b>hi</b> a < b"
HARMONY = ("<|channel|>analysis<|message|>Simple greeting.<|end|>"
           "<|start|>assistant<|channel|>final<|message|>Hello <there>!<|return|>")


def pieces(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, min(12, len(text) - 1))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def streamed(splitter, parts: list[str]) -> tuple[str | None, str]:
    out = []
    for p in parts:
        out += splitter.push(p)
    d = joined(out + splitter.flush())
    return d.get("reasoning_content"), d.get("content", "")


@pytest.mark.parametrize("seed", range(40))
def test_think_split_whole_and_in_any_pieces(seed):
    want = ("The user greets me. I greet back.\n", "Hello! <b>hi</b> a < b")
    assert split_all(ThinkSplitter(), THINKING) == want
    rng = random.Random(seed)
    assert streamed(ThinkSplitter(), pieces(THINKING, rng)) == want
    assert streamed(ThinkSplitter(), list(THINKING)) == want  # one character at a time
    # the template opened the block: the model's text starts inside it
    opened = THINKING.removeprefix("<think>")
    assert streamed(ThinkSplitter(in_reasoning=True), pieces(opened, rng)) == want


def test_think_edge_cases():
    assert split_all(ThinkSplitter(), "no tags at all <thin") == (None, "no tags at all <thin")
    assert split_all(ThinkSplitter(in_reasoning=True), "cut off mid thought <") == (
        "cut off mid thought <", "")
    assert split_all(ThinkSplitter(), "<think>\n\n</think>\n\nAnswer") == (None, "Answer")
    # after the block, a later <think> is text of the answer, not a new block
    assert split_all(ThinkSplitter(), "<think>a</think>b <think>c") == ("a", "b <think>c")


@pytest.mark.parametrize("seed", range(20))
def test_harmony_split_in_any_pieces(seed):
    want = ("Simple greeting.", "Hello <there>!")
    assert split_all(HarmonySplitter(), HARMONY) == want
    assert streamed(HarmonySplitter(), pieces(HARMONY, random.Random(seed))) == want
    call = "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
    assert split_all(HarmonySplitter(), call) == (None, "{}")  # no tools to return it in: content


def _engine(arch: str, template: str | None, extra: list[str] = ()):
    md = synthetic_tokenizer_metadata(400, "gpt-oss" if arch == "gpt-oss" else "qwen2", seed=1)
    md["tokenizer.ggml.tokens"] = md["tokenizer.ggml.tokens"][: 400 - len(extra)] + list(extra)
    md["tokenizer.ggml.token_type"] = md["tokenizer.ggml.token_type"][: 400 - len(extra)] + [4] * len(extra)
    if template is not None:
        md["tokenizer.chat_template"] = template
    return types.SimpleNamespace(architecture=arch, tokenizer=load_tokenizer(md))


QWEN3ISH = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{{ opener }}{% endif %}{# <think> #}")


@pytest.mark.parametrize("opener, opened", [("", False), ("<think>\n", True),
                                            ("<think>\n\n</think>\n\n", False)])
def test_think_models_and_where_the_prompt_leaves_them(opener, opened):
    eng = _engine("qwen3", QWEN3ISH.replace("{{ opener }}", opener), ["<think>", "</think>"])
    ids = eng.tokenizer.encode_chat([{"role": "user", "content": "Hi"}])
    split = splitter_for(eng, ids)
    assert split is not None and split().kind == ("reasoning_content" if opened else "content")


def test_which_models_get_a_splitter():
    assert splitter_for(_engine("gpt-oss", None), [1, 2]) is HarmonySplitter
    assert splitter_for(_engine("qwen2", None), [1, 2]) is None  # plain ChatML: no reasoning field


class _Hub:
    """event_batches over canned events: the stream transformation alone, no engine."""

    def __init__(self, texts: list[str]):
        self.texts = texts

    async def event_batches(self, job):
        n = len(self.texts)
        for i, t in enumerate(self.texts):
            ev = TokenEvent("r", i, t, i, finished=i == n - 1, finish_reason="eos" if i == n - 1 else None)
            job.finish_reason = ev.finish_reason
            yield [ev]


def test_chat_stream_deltas_carry_reasoning_then_content():
    texts = ["<thi", "nk>\nPon", "der.</th", "ink>\n", "\nHi", " there", ""]
    fmt = ChoiceFormat(chat=True, split=ThinkSplitter)
    job = types.SimpleNamespace(finish_reason=None, prompt_ids=[1], tokens_out=len(texts))

    async def run() -> list[bytes]:
        return [b async for b in stream_choices(_Hub(texts), [job], fmt, lambda c: {"choices": c}, False)]

    frames = b"".join(asyncio.run(run())).decode().split("\n\n")
    chunks = [json.loads(f[len("data: "):]) for f in frames if f.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[-1] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Ponder."
    assert "".join(d.get("content", "") for d in deltas) == "Hi there"
    assert all(set(d) <= {"reasoning_content"} for d in deltas[1:3]) and frames[-2] == "data: [DONE]"


REAL = {"Qwen-Qwen3-0.6B": "content", "Qwen-QwQ-32B": "content", "Qwen3.5-4B": "reasoning_content",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "reasoning_content", "llama-cpp-deepseek-r1":
        "reasoning_content", "deepseek-ai-DeepSeek-V3.1": "content", "openai-gpt-oss-120b": "harmony",
        "Qwen-Qwen2.5-7B-Instruct": None, "meta-llama-Llama-3.1-8B-Instruct": None}


def test_real_templates_pick_their_splitter():
    """llama.cpp's templates: where each leaves the model after its generation prompt (Qwen3 writes its
    own <think>; DeepSeek-V3.1's prompt and llama.cpp's QwQ without enable_thinking close an empty block:
    content; Qwen3.5 and the R1 distills open the block: reasoning)."""
    from orcd import testdata

    try:
        data = testdata.fetch()
    except (testdata.TestDataError, OSError) as err:
        pytest.skip(f"llama.cpp templates missing: {err}")
    paths = {p.name.removesuffix(".jinja"): p for p in data.templates()}
    got = {}
    for name in REAL:
        eng = _engine("x", paths[name].read_text(), ["<think>", "</think>"])
        split = splitter_for(eng, eng.tokenizer.encode_chat([{"role": "user", "content": "Hi"}]))
        got[name] = None if split is None else "harmony" if split is HarmonySplitter else split().kind
    assert got == REAL
