"""OpenAI-compatible routes through the official `openai` client (and raw httpx for the wire format)."""

from __future__ import annotations

import json

import openai
import pytest
from server_helpers import sse_blocks

MODEL = "tiny-qwen2"
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a color."}]


def test_models_list(oai):
    assert [m.id for m in oai.models.list()] == [MODEL]


def test_chat_stream_with_usage(oai):
    stream = oai.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, max_tokens=10, seed=3,
                                         stream_options={"include_usage": True},
                                         extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and chunks[-1].choices == []
    assert usage_chunks[0].usage.completion_tokens == 10
    full = oai.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, seed=3,
                                       extra_body={"ignore_eos": True})
    assert full.choices[0].message.content == text and full.choices[0].finish_reason == "length"
    assert full.usage.prompt_tokens == usage_chunks[0].usage.prompt_tokens
    assert full.usage.total_tokens == full.usage.prompt_tokens + 10


def test_completion_stream_matches_non_stream(oai):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=12, seed=9, temperature=0.7,
              extra_body={"ignore_eos": True})
    streamed = "".join(c.choices[0].text for c in oai.completions.create(stream=True, **kw) if c.choices)
    full = oai.completions.create(**kw)
    assert full.choices[0].text == streamed and full.choices[0].finish_reason == "length"
    assert full.usage.completion_tokens == 12
    echoed = oai.completions.create(echo=True, **kw)
    assert echoed.choices[0].text == "Once upon a time" + streamed


def test_seed_and_stop_are_honoured(oai):
    kw = dict(model=MODEL, prompt="abc", max_tokens=24, temperature=1.0, extra_body={"ignore_eos": True})
    a = oai.completions.create(seed=123, **kw).choices[0].text
    assert oai.completions.create(seed=123, **kw).choices[0].text == a
    stop = a[8:11]
    cut = oai.completions.create(seed=123, stop=[stop], **kw).choices[0]
    assert cut.text == a[: a.find(stop)] and cut.finish_reason == "stop"


def test_max_completion_tokens(oai):
    r = oai.chat.completions.create(model=MODEL, messages=MESSAGES, max_completion_tokens=3,
                                    extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"


def test_stream_wire_format_ends_with_done(client):
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "stream": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        blocks = [(e, d) for e, d in sse_blocks(r) if e != "comment"]
    assert blocks[-1] == ("message", "[DONE]")
    assert all(json.loads(d)["object"] == "chat.completion.chunk" for _, d in blocks[:-1])


@pytest.mark.parametrize("kwargs, param", [
    ({"n": 17}, "n"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice.function.name"),
    ({"logit_bias": {"5": 1.0}}, "logit_bias"),
    ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
    ({"store": True}, "store"),
    ({"modalities": ["text", "audio"]}, "modalities.1"),
    ({"verbosity": "loud"}, "verbosity"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
])
def test_unsupported_or_bad_fields_are_400_naming_them(oai, kwargs, param):
    with pytest.raises(openai.BadRequestError) as exc:
        oai.chat.completions.create(model=MODEL, messages=MESSAGES, **kwargs)
    err = exc.value.body
    assert err["param"] == param and err["type"] == "invalid_request_error"
    assert set(err) == {"message", "type", "param", "code"}


def test_fields_the_sdk_sends_at_neutral_values_change_nothing(oai):
    """store=false, metadata, modalities=["text"], verbosity, safety_identifier, prompt_cache_key and
    service_tier are taken (ignored: docs/api.md says why each) and the answer is the one without them."""
    kw = dict(model=MODEL, messages=MESSAGES, max_tokens=8, seed=5)
    plain = oai.chat.completions.create(**kw)
    extra = oai.chat.completions.create(**kw, store=False, metadata={"run": "1"}, modalities=["text"],
                                        verbosity="low", safety_identifier="u1", prompt_cache_key="k",
                                        service_tier="auto", extra_body={"prompt_cache_retention": "24h"})
    assert extra.choices[0].message.content == plain.choices[0].message.content
    assert extra.usage.prompt_tokens == plain.usage.prompt_tokens


def test_context_overflow_names_the_numbers(oai):
    with pytest.raises(openai.BadRequestError) as exc:
        oai.completions.create(model=MODEL, prompt="hello", max_tokens=50000)
    err = exc.value.body
    assert err["code"] == "context_length_exceeded"
    assert "50000" in err["message"] and "32768" in err["message"]


def test_unknown_model_is_404(oai):
    with pytest.raises(openai.NotFoundError) as exc:
        oai.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert exc.value.body["code"] == "model_not_found"


def test_wrong_key_is_401(server):
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
