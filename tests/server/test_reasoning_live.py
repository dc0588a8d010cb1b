"""reasoning_content through a real `orcd serve`, with the official openai client: a tiny model whose
vocabulary holds `<think>` / `</think>` (user-defined, as in Qwen3's files) and whose chat template opens the
block for it, and a tiny gpt-oss (Harmony). Each choice's reasoning_content / content must be exactly its
raw text (the same prompt ids and seed through /v1/completions) split by the model's splitter, streamed
and not."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI
from server_helpers import TINY, ServerProc

from orcd.gguf.synth import write_model_gguf
from orcd.gguf.synth_gpt_oss import write_gpt_oss_gguf
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.server.reasoning import HarmonySplitter, ThinkSplitter, split_all

V = TINY["vocab_size"]
THINK_TEMPLATE = ("{% if reasoning_effort is defined %}<|im_start|>system\nReasoning: {{ reasoning_effort }}"
                  "<|im_end|>\n{% endif %}"
                  "{% for m in messages %}<|im_start|>{{ m.role }}\n"
                  "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
                  "{{ m.content }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n"
                  "{% if enable_thinking is defined and not enable_thinking %}</think>\n\n{% endif %}"
                  "{% endif %}")
ASK = [{"role": "user", "content": "Why is the sky blue?"}]


def think_model(path):
    md = synthetic_tokenizer_metadata(V - 2, "qwen2", seed=3)
    md["tokenizer.ggml.tokens"] += ["<think>", "</think>"]
    md["tokenizer.ggml.token_type"] += [4, 4]  # user-defined: decoding keeps them
    md["tokenizer.chat_template"] = THINK_TEMPLATE
    return write_model_gguf(path, "qwen2", seed=3, tokenizer_metadata=md, **TINY)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ServerProc]:
    d = tmp_path_factory.mktemp("reasoning")
    harmony = write_gpt_oss_gguf(d / "h.gguf", vocab_size=V, hidden=64, n_layers=1, ffn=64, n_heads=4,
                                 n_kv_heads=2, head_dim=16, n_experts=4, n_experts_used=2, seed=2)
    srv = ServerProc(think_model(d / "t.gguf"), d / "serve.log", "--model", f"harmony={harmony}")
    try:  # both models on one server: "t" (the file stem) and "harmony"
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def raw_texts(srv: ServerProc, model: str, n: int, seed: int | None, **extra) -> list[str]:
    with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=60) as c:
        ids = c.post("/tokenize", json={"model": model, "messages": ASK}).json()["tokens"]
        r = c.post("/v1/completions", json={"model": model, "prompt": ids, "n": n, "seed": seed,
                                            "max_tokens": 40, **extra}).json()
    return [ch["text"] for ch in sorted(r["choices"], key=lambda ch: ch["index"])]


@pytest.mark.parametrize("model, splitter", [("t", lambda: ThinkSplitter(in_reasoning=True)),
                                             ("harmony", HarmonySplitter)])
def test_reasoning_content_is_the_split_raw_text(server, model, splitter):
    client = OpenAI(base_url=server.url + "/v1", api_key=server.api_key)
    n, seed = 8, 11
    raws = raw_texts(server, model, n, seed)
    want = [split_all(splitter(), t) for t in raws]
    got = client.chat.completions.create(model=model, messages=ASK, n=n, seed=seed, max_tokens=40)
    msgs = [ch.message for ch in sorted(got.choices, key=lambda ch: ch.index)]
    assert [(m.reasoning_content, m.content) for m in msgs] == want
    streamed = [[None, ""] for _ in range(n)]
    for chunk in client.chat.completions.create(model=model, messages=ASK, n=n, seed=seed, max_tokens=40,
                                                stream=True):
        for ch in chunk.choices:
            r, c = getattr(ch.delta, "reasoning_content", None), ch.delta.content
            if r:
                streamed[ch.index][0] = (streamed[ch.index][0] or "") + r
            streamed[ch.index][1] += c or ""
    assert [tuple(s) for s in streamed] == want
    if model == "t":  # the model closed the block in some choices: both fields were filled
        assert any(r and c for r, c in want)
    else:  # the random model wrote Harmony markup, which the parser took out of the content
        assert any(c != raw for (_, c), raw in zip(want, raws, strict=True))


def test_anthropic_thinking_blocks(server):
    """/v1/messages: the reasoning as a `thinking` block when the request enables thinking, else left out;
    never in the text."""
    import anthropic

    claude = anthropic.Anthropic(base_url=server.url, api_key=server.api_key, max_retries=0, timeout=60)
    for seed in range(100):  # a seed with which the model closes its block within 40 tokens
        reasoning, content = split_all(ThinkSplitter(in_reasoning=True), raw_texts(server, "t", 1, seed)[0])
        if reasoning and content:
            break
    kw = dict(model="t", max_tokens=40, messages=ASK, extra_body={"seed": seed})
    plain = claude.messages.create(**kw)
    assert [(b.type, b.text) for b in plain.content] == [("text", content)]
    want = [("thinking", reasoning)] if reasoning else []
    for thinking in ({"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"},
                     {"type": "adaptive", "display": "summarized"}):
        with claude.messages.stream(**kw, thinking=thinking) as s:
            msg = s.get_final_message()
        assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in msg.content] == \
            [*want, ("text", content)]
    omitted = claude.messages.create(**kw, thinking={"type": "adaptive", "display": "omitted"})
    assert [(b.type, b.text) for b in omitted.content] == [("text", content)]


def test_chat_template_kwargs_switch_thinking_off(server):
    """`chat_template_kwargs: {"enable_thinking": false}` reaches the template, whose prompt then closes the
    block: the whole answer is content, as the raw text of the same prompt."""
    client = OpenAI(base_url=server.url + "/v1", api_key=server.api_key)
    kw = dict(model="t", messages=ASK, max_tokens=12, seed=4)
    on = client.chat.completions.create(**kw)
    off = client.chat.completions.create(**kw,
                                         extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off.usage.prompt_tokens == on.usage.prompt_tokens + 3  # "</think>", "\n\n"
    assert off.choices[0].message.reasoning_content is None and off.choices[0].message.content
    assert on.choices[0].message.reasoning_content
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
        r = c.post("/v1/chat/completions", json={**kw, "chat_template_kwargs": {"messages": []}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template_kwargs.messages"


def test_reasoning_effort_is_the_templates_variable(server):
    """Chat `reasoning_effort` and Responses `reasoning.effort` reach the chat template as its
    `reasoning_effort` variable (the "t" template then writes a system line), as chat_template_kwargs
    does; a value outside OpenAI's set, or one that disagrees with chat_template_kwargs, is a 400. (gpt-oss's
    real template with that variable: tests/tokenizer/test_harmony_template.py, against transformers.)"""
    client = OpenAI(base_url=server.url + "/v1", api_key=server.api_key, max_retries=0)
    kw = dict(model="t", messages=ASK, max_tokens=6, seed=4)
    plain = client.chat.completions.create(**kw)
    high = client.chat.completions.create(**kw, reasoning_effort="high")
    as_kwarg = {"chat_template_kwargs": {"reasoning_effort": "high"}}
    same = client.chat.completions.create(**kw, extra_body=as_kwarg)
    assert high.usage.prompt_tokens > plain.usage.prompt_tokens  # "<|im_start|>system\nReasoning: high…"
    assert high.usage.prompt_tokens == same.usage.prompt_tokens
    assert high.choices[0].message == same.choices[0].message  # the same prompt and seed
    import anthropic

    claude = anthropic.Anthropic(base_url=server.url, api_key=server.api_key, max_retries=0, timeout=60)
    counted = [claude.messages.count_tokens(model="t", messages=ASK, output_config=config).input_tokens
               for config in ({}, {"effort": "high"})]  # Anthropic's output_config.effort: the same variable
    assert counted == [plain.usage.prompt_tokens, high.usage.prompt_tokens]
    resp = client.responses.create(model="t", input=ASK[0]["content"], reasoning={"effort": "high"},
                                   max_output_tokens=6)
    assert resp.usage.input_tokens == high.usage.prompt_tokens
    bad = [{"reasoning_effort": "extreme"}, {"reasoning_effort": 2},
           {"reasoning_effort": "low", **as_kwarg}]  # disagrees with chat_template_kwargs
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
        for change in bad:
            r = c.post("/v1/chat/completions", json={**kw, **change})
            assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort", r.text
        agree = c.post("/v1/chat/completions", json={**kw, "reasoning_effort": "high", **as_kwarg})
    assert agree.status_code == 200 and agree.json()["usage"]["prompt_tokens"] == high.usage.prompt_tokens


def test_reasoning_content_in_the_history_reaches_the_template(server):
    """An assistant turn's reasoning_content, sent back as orcd returned it, is the template's
    `reasoning_content` (Qwen3's template renders it; transformers' gpt-oss template reads `thinking`,
    also set); on a user message it is a 400 naming it."""
    client = OpenAI(base_url=server.url + "/v1", api_key=server.api_key, max_retries=0)
    turn = {"role": "assistant", "content": "Scattering."}
    history = [ASK[0], turn, {"role": "user", "content": "Why at sunset red?"}]
    kw = dict(model="t", max_tokens=4, seed=1)
    plain = client.chat.completions.create(messages=history, **kw)
    thought = [ASK[0], {**turn, "reasoning_content": "Rayleigh."}, history[2]]
    sent = client.chat.completions.create(messages=thought, **kw)
    assert sent.usage.prompt_tokens > plain.usage.prompt_tokens  # "<think>\nRayleigh.\n</think>\n\n"
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
        bad = [{**ASK[0], "reasoning_content": "no"}]
        r = c.post("/v1/chat/completions", json={**kw, "messages": bad})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.0.reasoning_content"
