"""Issue 18's bugs, each through a real `orcd serve` and, where one runs on loopback, a real client."""

from __future__ import annotations

import json
import os

import httpx
import openai
import pytest
from server_helpers import ServerProc

MODEL = "tiny-qwen2"
ORIGIN = "https://app.example"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
COMPLETION = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
GENERATE = {"prompt": "hi", "max_tokens": 2, "stream": False}
# What the OpenAI JavaScript SDK (stainless) asks for in a browser preflight.
STAINLESS = ("authorization,content-type,x-stainless-arch,x-stainless-lang,x-stainless-os,"
             "x-stainless-package-version,x-stainless-retry-count,x-stainless-runtime,"
             "x-stainless-runtime-version,x-stainless-timeout")


@pytest.fixture(scope="module")
def roomy(tiny_model, tmp_path_factory):
    """A server that lets a browser origin in and takes bodies past 1 MiB of prompt."""
    srv = ServerProc(tiny_model, tmp_path_factory.mktemp("roomy") / "serve.log", "--cors-origin", ORIGIN,
                     "--max-body-bytes", str(8 << 20))
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_cors_preflight_allows_the_js_sdk_headers(roomy):
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": STAINLESS}
    r = httpx.options(roomy.url + "/v1/chat/completions", headers=pre)
    assert r.status_code == 200, r.text
    allowed = {h.strip() for h in r.headers["access-control-allow-headers"].lower().split(",")}
    assert set(STAINLESS.split(",")) <= allowed
    assert r.headers["access-control-allow-origin"] == ORIGIN
    real = httpx.post(roomy.url + "/v1/chat/completions", json=CHAT,
                      headers={"Origin": ORIGIN, "x-stainless-os": "MacOS", **roomy.headers}, timeout=60)
    assert real.status_code == 200 and real.headers["access-control-allow-origin"] == ORIGIN
    evil = httpx.options(roomy.url + "/v1/chat/completions", headers={**pre, "Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in evil.headers


def _raw(body: dict) -> bytes:
    return json.dumps(body).encode()  # ensure_ascii: a lone surrogate goes out as its \ud83d escape


@pytest.mark.parametrize("route, body, param", [
    ("/v1/generate", {**GENERATE, "prompt": "a\ud83d"}, "prompt"),
    ("/v1/generate", {**GENERATE, "stop": ["x", "\udc00"]}, "stop.1"),
    ("/v1/generate", {**GENERATE, "chat": True, "prompt": "\ud83d b"}, "prompt"),
    ("/v1/completions", {**COMPLETION, "prompt": ["cut \ud83d"]}, "prompt.0"),
    ("/v1/completions", {**COMPLETION, "user": "\ud83d"}, "user"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "\ud83d"}]},
     "messages.0.content"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "ok"}, {"type": "text", "text": "x\ud83dy"}]}]},
     "messages.0.content.1.text"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "a", "name": "\ud83d"}]},
     "messages.0.name"),
    ("/v1/chat/completions", {**CHAT, "model": "\ud83d"}, "model"),
    ("/v1/chat/completions", {**CHAT, "stop": "\ud83d"}, "stop"),
    ("/v1/cancel", {"request_id": "r\ud83d"}, "request_id"),
])
def test_lone_surrogate_is_400_naming_the_field(client, server, route, body, param):
    r = client.post(route, content=_raw(body), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and "surrogate" in err["message"]
    assert "Traceback" not in server.log()


def test_bytes_that_are_not_utf8_are_400(client):
    r = client.post("/v1/completions", content=b'{"model": "tiny-qwen2", "prompt": "bad \xff\xfe"}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    assert "UTF-8" in r.json()["error"]["message"]


def test_lone_surrogate_in_a_key_is_400(client):
    r = client.post("/v1/chat/completions", content=_raw({**CHAT, "x\ud83d": 1}),
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "x\\ud83d"


class _CutEmoji(httpx.HTTPTransport):
    """Sends what a JavaScript client sends after cutting a string inside an emoji (the Python SDK cannot
    encode a lone surrogate itself): CUT in the body becomes the JSON escape \\ud83d. Counts requests."""

    def __init__(self):
        super().__init__()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        body = request.read().replace(b"CUT", b"\\ud83d")
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        return super().handle_request(httpx.Request(request.method, request.url, headers=headers,
                                                    content=body))


def test_lone_surrogate_through_the_sdk_is_not_retried(server):
    transport = _CutEmoji()
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=server.api_key, max_retries=2,
                        http_client=httpx.Client(transport=transport, timeout=60))
    with pytest.raises(openai.BadRequestError) as exc:
        sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "emoji CUT"}])
    assert exc.value.body["param"] == "messages.0.content" and transport.sent == 1


def test_streamed_echo_completion_has_text_in_every_chunk(oai):
    kw = dict(model=MODEL, prompt="Once upon", max_tokens=6, seed=4, echo=True,
              extra_body={"ignore_eos": True})
    chunks = [c for c in oai.completions.create(stream=True, **kw) if c.choices]
    assert all(isinstance(c.choices[0].text, str) for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].choices[0].text == ""
    assert "".join(c.choices[0].text for c in chunks) == oai.completions.create(**kw).choices[0].text


def test_max_completion_tokens_overflow_names_it(oai):
    with pytest.raises(openai.BadRequestError) as exc:
        oai.chat.completions.create(model=MODEL, messages=CHAT["messages"], max_completion_tokens=40000)
    assert exc.value.body["param"] == "max_completion_tokens"
    assert exc.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as exc:
        oai.chat.completions.create(model=MODEL, messages=CHAT["messages"], max_completion_tokens=0)
    assert exc.value.body["param"] == "max_completion_tokens"


@pytest.mark.parametrize("route, base, field, value", [
    (route, base, field, value)
    for route, base in (("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT),
                        ("/v1/generate", GENERATE))
    for field, value in (("max_tokens", True), ("max_tokens", "5"), ("max_tokens", 5.0), ("stream", "no"),
                         ("stream", 0), ("temperature", "0"), ("temperature", True), ("seed", "1"),
                         ("top_k", 2.0), ("ignore_eos", 1), ("stop", 7))
] + [("/v1/completions", COMPLETION, "n", True), ("/v1/chat/completions", CHAT, "n", True),
     ("/v1/completions", COMPLETION, "echo", "yes"), ("/v1/completions", COMPLETION, "prompt", [1, "a"]),
     ("/v1/chat/completions", CHAT, "stream_options", {"include_usage": "true"}),
     ("/v1/generate", GENERATE, "chat", "true"), ("/v1/cancel", {}, "request_id", 5)])
def test_wrong_json_types_are_refused(client, route, base, field, value):
    r = client.post(route, json={**base, field: value})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].split(".")[0] == field


def test_integers_are_fine_for_float_fields(oai):
    r = oai.chat.completions.create(model=MODEL, messages=CHAT["messages"], max_tokens=2, temperature=1,
                                    top_p=1, presence_penalty=0, frequency_penalty=0)
    assert r.choices[0].finish_reason in ("length", "stop")


def test_context_overflow_is_worded_as_openai_does(oai):
    with pytest.raises(openai.BadRequestError) as exc:
        oai.completions.create(model=MODEL, prompt="hello", max_tokens=40000)
    err = exc.value.body
    assert err["code"] == "context_length_exceeded" and err["param"] == "max_tokens"
    assert err["message"].startswith("This model's maximum context length is 32768 tokens. However, you "
                                     "requested 4")
    assert "40000 in the completion" in err["message"]


def test_litellm_sees_a_context_window_error(server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no model-price download
    litellm = pytest.importorskip("litellm")
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(model="openai/" + MODEL, api_base=server.url + "/v1", api_key=server.api_key,
                           messages=CHAT["messages"], max_tokens=40000, num_retries=0)


@pytest.mark.parametrize("route, body, param", [
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "word " * 230000}]},
     "messages"),
    ("/v1/generate", {**GENERATE, "chat": True, "prompt": "word " * 230000}, "prompt"),
    ("/v1/completions", {**COMPLETION, "prompt": "word " * 230000}, "prompt"),
])
def test_prompt_over_one_mib_is_a_context_overflow(roomy, route, body, param):
    r = httpx.post(roomy.url + route, json=body, headers=roomy.headers, timeout=120)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == param
    assert err["message"].startswith("This model's maximum context length is 32768 tokens. However, your ")


def test_no_server_error_was_logged(server, roomy):
    for srv in (server, roomy):
        assert "Traceback" not in srv.log() and os.path.exists(srv.log_path)
