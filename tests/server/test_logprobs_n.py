"""logprobs / top_logprobs and n > 1 on the OpenAI routes, through the official `openai` client.
(The values themselves are checked against a reference forward in tests/engine/test_logprobs.py.)"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from server_helpers import metric, wait_idle

MODEL = "tiny-qwen2"
MESSAGES = [{"role": "user", "content": "Name a color."}]
FREE = {"ignore_eos": True}  # exactly max_tokens tokens, whatever the random model samples


def _check_entry(entry, k: int) -> None:
    tops = [t.logprob for t in entry.top_logprobs]
    assert len(tops) == k and tops == sorted(tops, reverse=True)
    assert all(t.logprob <= 0 for t in entry.top_logprobs) and entry.logprob <= 0
    if k and entry.logprob > tops[-1] + 1e-5:  # the sampled token ranks among the top k: it is listed
        assert entry.token in [t.token for t in entry.top_logprobs]
    if entry.token.startswith("bytes:"):
        assert entry.token == "bytes:" + "".join(f"\\x{b:02x}" for b in entry.bytes)
    else:
        assert entry.token.encode() == bytes(entry.bytes)


def test_chat_logprobs_streamed_and_not(oai):
    kw = dict(model=MODEL, messages=MESSAGES, max_tokens=8, seed=5, logprobs=True, top_logprobs=3,
              extra_body=FREE)
    full = oai.chat.completions.create(**kw)
    content = full.choices[0].logprobs.content
    assert len(content) == full.usage.completion_tokens == 8
    for entry in content:
        _check_entry(entry, 3)
    text = b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace")
    assert text == full.choices[0].message.content
    chunks = [c for c in oai.chat.completions.create(stream=True, **kw)
              if c.choices and c.choices[0].logprobs]
    streamed = [e for c in chunks for e in c.choices[0].logprobs.content]
    assert [(e.token, e.bytes) for e in streamed] == [(e.token, e.bytes) for e in content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content], abs=1e-5)


def test_greedy_logprobs_rank_the_sampled_token_first(oai):
    r = oai.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0,
                                    logprobs=True, top_logprobs=2, extra_body=FREE)
    for entry in r.choices[0].logprobs.content:
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)


def test_logprobs_off_is_null_and_zero_top_is_empty(oai):
    r = oai.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, extra_body=FREE)
    assert r.choices[0].logprobs is None
    r = oai.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, logprobs=True,
                                    extra_body=FREE)
    assert [len(e.top_logprobs) for e in r.choices[0].logprobs.content] == [0, 0, 0]


def test_completion_logprobs_zero_returns_the_sampled_tokens(oai):
    r = oai.completions.create(model=MODEL, prompt="Once upon", max_tokens=6, seed=2, logprobs=0,
                               extra_body=FREE)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == 6
    assert all(v <= 0 for v in lp.token_logprobs)
    assert [list(d.items()) for d in lp.top_logprobs] == [[(t, v)] for t, v in
                                                         zip(lp.tokens, lp.token_logprobs, strict=True)]
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)


def test_completion_logprobs_streamed_equal_non_streamed(oai):
    kw = dict(model=MODEL, prompt="Once upon", max_tokens=7, seed=8, logprobs=2, extra_body=FREE)
    full = oai.completions.create(**kw).choices[0].logprobs
    tokens, offsets, tops = [], [], []
    for c in oai.completions.create(stream=True, **kw):
        if c.choices and c.choices[0].logprobs:
            tokens += c.choices[0].logprobs.tokens
            offsets += c.choices[0].logprobs.text_offset
            tops += c.choices[0].logprobs.top_logprobs
    assert tokens == full.tokens and offsets == full.text_offset
    assert all(2 <= len(t) <= 3 and tok in t for t, tok in zip(tops, tokens, strict=True))


def test_echo_with_logprobs_is_refused(oai):
    with pytest.raises(openai.BadRequestError) as exc:
        oai.completions.create(model=MODEL, prompt="x", max_tokens=2, echo=True, logprobs=1)
    assert exc.value.body["param"] == "echo"


def test_chat_n_choices_have_their_own_seed_streams(oai):
    kw = dict(model=MODEL, messages=MESSAGES, max_tokens=8, seed=21, temperature=1.0, extra_body=FREE)
    r = oai.chat.completions.create(n=3, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.message.content for c in r.choices]
    assert len(set(texts)) == 3 and all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 24
    alone = oai.chat.completions.create(n=1, **kw)
    assert alone.choices[0].message.content == texts[0] and r.usage.prompt_tokens == alone.usage.prompt_tokens
    assert oai.chat.completions.create(n=3, **kw).choices[2].message.content == texts[2]  # seeded: repeatable
    streamed = ["", "", ""]
    for chunk in oai.chat.completions.create(n=3, stream=True, **kw):
        for c in chunk.choices:
            streamed[c.index] += c.delta.content or ""
    assert streamed == texts


def test_completion_n_with_best_of_and_logprobs(oai):
    r = oai.completions.create(model=MODEL, prompt="abc", max_tokens=4, n=2, best_of=2, seed=3, logprobs=1,
                               extra_body=FREE)
    assert [c.index for c in r.choices] == [0, 1]
    assert all(len(c.logprobs.tokens) == 4 for c in r.choices)
    with pytest.raises(openai.BadRequestError) as exc:
        oai.completions.create(model=MODEL, prompt="abc", max_tokens=4, n=1, best_of=3)
    assert exc.value.body["param"] == "best_of"


def test_n_prefills_the_prompt_once(oai, client):
    wait_idle(client)
    prompt = "The prefix cache shares this prompt between the choices. " * 6
    before = metric(client.get("/metrics").text, "orcd_prefix_cache_hits_total")
    r = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=3, n=3, seed=1, extra_body=FREE)
    n_prompt = r.usage.prompt_tokens
    assert n_prompt > 64 and len(r.choices) == 3
    hits = metric(client.get("/metrics").text, "orcd_prefix_cache_hits_total") - before
    assert hits >= 2 * ((n_prompt - 1) // 16) * 16  # each fork found every full block of the prompt


def test_cancel_by_id_ends_every_choice(server, client):
    body = {"model": MODEL, "prompt": "go", "max_tokens": 20000, "n": 2, "stream": True, "ignore_eos": True}
    finishes, cancelled = {}, None
    with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=server.headers,
                      timeout=60) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[len("data: "):])
            if cancelled is None:  # the response id cancels the whole request, every choice
                cancelled = client.post("/v1/cancel", json={"request_id": chunk["id"]}).json()
            finishes.update({c["index"]: c["finish_reason"] for c in chunk["choices"] if c["finish_reason"]})
    assert cancelled["cancelled"] is True
    assert finishes == {0: "cancelled", 1: "cancelled"}
    wait_idle(client)


def test_n_beyond_what_the_server_holds_is_400(oai):
    with pytest.raises(openai.BadRequestError) as exc:  # this server: 2 running slots + 1 queued
        oai.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, n=4)
    assert exc.value.body["param"] == "n" and "(3)" in exc.value.body["message"]


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_goes_away_cancels_every_choice(server, client, stream):
    body = {"model": MODEL, "prompt": "go", "max_tokens": 20000, "n": 3, "stream": stream, "ignore_eos": True}
    if stream:
        with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=server.headers,
                          timeout=60) as r:
            lines = r.iter_lines()
            while not next(lines).startswith("data: {"):
                pass
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + "/v1/completions", json=body, headers=server.headers, timeout=1.5)
    health = wait_idle(client)
    assert health["kv_blocks_used"] == 0
