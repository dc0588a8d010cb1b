"""Every bad-input case gets its status and a message naming the field; the server keeps serving."""

from __future__ import annotations

import httpx
import pytest
from server_helpers import API_KEY

GOOD = {"prompt": "hello", "max_tokens": 3, "stream": False}


@pytest.mark.parametrize("body, status, param, words", [
    ({**GOOD, "temperature": "hot"}, 400, "temperature", "valid number"),
    ({**GOOD, "prompt": 42}, 400, "prompt", "string"),
    ({**GOOD, "top_p": 1.5}, 400, "top_p", "out of range"),
    ({**GOOD, "top_k": -1}, 400, "top_k", "out of range"),
    ({**GOOD, "repetition_penalty": 0}, 400, "repetition_penalty", "out of range"),
    ({**GOOD, "max_tokens": 0}, 400, "max_tokens", "at least 1"),
    ({**GOOD, "seed": -1}, 400, "seed", "out of range"),
    ({**GOOD, "stop": [""]}, 400, "stop", "out of range"),
    ({**GOOD, "unknown_knob": 1}, 400, "unknown_knob", "unrecognized"),
    ({**GOOD, "request_id": "bad id!"}, 400, "request_id", "pattern"),
    ({"max_tokens": 3}, 400, "prompt", "required"),
    ({**GOOD, "max_tokens": 40000}, 400, "max_tokens", "maximum context length is 32768 tokens"),
    ({**GOOD, "model": "other-model"}, 404, "model", "does not exist"),
])
def test_generate_bad_input(client, body, status, param, words):
    r = client.post("/v1/generate", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"]


def test_context_overflow_says_the_numbers(client):
    err = client.post("/v1/generate", json={**GOOD, "max_tokens": 32767}).json()["error"]
    assert err["code"] == "context_length_exceeded"
    assert "32767" in err["message"] and "32768" in err["message"]


def test_malformed_json(client):
    r = client.post("/v1/generate", content=b'{"prompt": "x",', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]


@pytest.mark.parametrize("content, words", [(b"", "missing"), (b"null", "JSON object"),
                                            (b"[1, 2]", "JSON object")])
def test_body_must_be_an_object(client, content, words):
    r = client.post("/v1/generate", content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400 and words in r.json()["error"]["message"]


def test_long_values_are_not_echoed_at_length(client):
    r = client.post("/v1/generate", json={**GOOD, "stop": ["s" * 300]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop"
    assert len(r.json()["error"]["message"]) <= 300


def test_deeply_nested_json_is_400(client):
    r = client.post("/v1/chat/completions", content=b'{"model": ' + b"[" * 50000,
                    headers={"content-type": "application/json"})
    assert r.status_code == 400


def test_body_limit_413(client, server):
    big = {"prompt": "x" * 70000}
    assert client.post("/v1/generate", json=big).status_code == 413

    def chunks():  # no Content-Length: the limit applies while reading
        for _ in range(20):
            yield b" " * 8192

    r = client.post("/v1/generate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_api_key_required_except_health(server):
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        assert anon.get("/health").status_code == 200
        for method, path in [("GET", "/v1/models"), ("POST", "/v1/generate"), ("GET", "/metrics"),
                             ("POST", "/v1/cancel"), ("GET", "/openapi.json")]:
            r = anon.request(method, path, json=GOOD if method == "POST" else None)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert anon.get("/v1/models", headers={"Authorization": "Bearer " + API_KEY[:-1]}).status_code == 401
        assert anon.get("/v1/models", headers={"x-api-key": API_KEY}).status_code == 200


def test_unknown_route_and_method(client):
    assert client.get("/v1/nothing").status_code == 404
    assert client.get("/v1/generate").status_code == 405


def test_no_cors_for_unlisted_origin(client):
    r = client.get("/v1/models", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers


def test_server_still_serves_and_never_logged_the_key(client, server):
    r = client.post("/v1/generate", json={**GOOD, "chat": True})
    assert r.status_code == 200 and r.json()["tokens_out"] >= 1
    assert client.get("/health").json()["status"] == "ok"
    log = server.log()
    assert API_KEY not in log and "Traceback" not in log


def test_openapi_schema_lists_every_route(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/generate", "/v1/cancel", "/v1/completions", "/v1/chat/completions", "/v1/models",
                 "/health", "/metrics", "/v1/models/{model_id}", "/tokenize", "/detokenize"):
        assert path in paths
