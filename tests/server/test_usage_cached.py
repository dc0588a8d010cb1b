"""Cached prompt tokens in usage, against the real `orcd serve` of these tests with the official clients:
a request whose prompt was seen before reports the whole 16-token blocks the prefix cache served --
chat/completions `prompt_tokens_details.cached_tokens` (whole and streamed), completions, Responses
`input_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens` (with `input_tokens` the rest)."""

from __future__ import annotations

import uuid

import openai
from server_helpers import ServerProc

MODEL = "tiny-qwen2"
BLOCK = 16  # tokens per KV block of the test server (the engine's default block size)


def _whole_blocks(n_prompt: int) -> int:
    """Tokens the prefix cache can serve to a prompt of n tokens: whole blocks, one token always left."""
    return (n_prompt - 1) // BLOCK * BLOCK


def _unique_text() -> str:
    """A prompt no other test sends (its blocks past the template's head are cached by nobody else)."""
    return f"Summarize the note {uuid.uuid4().hex} about the rain over the hills. " * 3


def test_chat_second_request_reports_cached_blocks(oai):
    messages = [{"role": "user", "content": _unique_text()}]
    first = oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    n = first.usage.prompt_tokens
    assert n > 3 * BLOCK
    cold = first.usage.prompt_tokens_details.cached_tokens
    assert cold % BLOCK == 0 and cold < _whole_blocks(n)  # the unique part was computed
    again = oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    assert again.usage.prompt_tokens == n
    assert again.usage.prompt_tokens_details.cached_tokens == _whole_blocks(n)
    chunks = list(oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == _whole_blocks(n)


def test_completions_and_n_report_cached_blocks(oai):
    prompt = _unique_text()
    first = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
    n = first.usage.prompt_tokens
    assert first.usage.prompt_tokens_details.cached_tokens < _whole_blocks(n)
    again = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=2, n=2)
    assert again.usage.prompt_tokens_details.cached_tokens == _whole_blocks(n)  # choice 0's, counted once


def test_responses_second_request_reports_cached_blocks(oai):
    text = _unique_text()
    first = oai.responses.create(model=MODEL, input=text, max_output_tokens=2)
    n = first.usage.input_tokens
    assert first.usage.input_tokens_details.cached_tokens < _whole_blocks(n)
    again = oai.responses.create(model=MODEL, input=text, max_output_tokens=2)
    assert again.usage.input_tokens_details.cached_tokens == _whole_blocks(n)
    events = list(oai.responses.create(model=MODEL, input=text, max_output_tokens=2, stream=True))
    assert events[-1].type == "response.incomplete"  # max_output_tokens
    final = events[-1].response
    assert final.usage.input_tokens_details.cached_tokens == _whole_blocks(n)


def test_anthropic_cache_read_splits_the_prompt(claude):
    messages = [{"role": "user", "content": _unique_text()}]
    n = claude.messages.count_tokens(model=MODEL, messages=messages).input_tokens
    first = claude.messages.create(model=MODEL, max_tokens=2, messages=messages)
    assert first.usage.cache_read_input_tokens < _whole_blocks(n)
    assert first.usage.input_tokens + first.usage.cache_read_input_tokens == n
    again = claude.messages.create(model=MODEL, max_tokens=2, messages=messages)
    assert again.usage.cache_read_input_tokens == _whole_blocks(n)
    assert again.usage.input_tokens == n - _whole_blocks(n)
    assert again.usage.cache_creation_input_tokens == 0
    with claude.messages.stream(model=MODEL, max_tokens=2, messages=messages) as stream:
        final = stream.get_final_message()
    assert (final.usage.cache_read_input_tokens, final.usage.input_tokens) == (_whole_blocks(n),
                                                                              n - _whole_blocks(n))


def test_cached_tokens_cross_the_engine_process(tiny_model, tmp_path_factory):
    """`orcd serve --engine-process`: the count travels with the events over the process boundary."""
    srv = ServerProc(tiny_model, tmp_path_factory.mktemp("log") / "cached.log", "--engine-process")
    try:
        srv.wait_ready()
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key=srv.api_key, max_retries=0, timeout=60)
        messages = [{"role": "user", "content": _unique_text()}]
        n = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2).usage.prompt_tokens
        again = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
        assert again.usage.prompt_tokens_details.cached_tokens == _whole_blocks(n)
    finally:
        srv.stop()
