"""Hostile requests (issue 8): random bodies built from orcd's own OpenAPI schema never get a 5xx,
and the server answers /health afterwards. (schemathesis is not a dependency; hypothesis does it.)
ORCD_FUZZ_EXAMPLES sets the number of cases (default 60)."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Text may hold lone surrogates (valid JSON escapes, invalid Unicode): the body goes out ASCII-escaped.
CUT = st.lists(st.characters() | st.sampled_from(["\ud83d", "\ude00", "\udfff"]), max_size=12).map("".join)
TEXT = st.text(max_size=12) | CUT
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TEXT
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
ROLES = st.sampled_from(["user", "system", "assistant", "tool", "x"])
MESSAGE = st.fixed_dictionaries({"role": ROLES, "content": TEXT | JSON})
MESSAGES = st.lists(MESSAGE, max_size=3)
EXAMPLES = int(os.environ.get("ORCD_FUZZ_EXAMPLES", "60"))
ROUTES = {"/v1/generate": {"prompt": "fuzz", "stream": False},
          "/v1/completions": {"model": "tiny-qwen2", "prompt": "fuzz"},
          "/v1/chat/completions": {"model": "tiny-qwen2", "messages": [{"role": "user", "content": "fuzz"}]},
          "/v1/cancel": {"request_id": "fuzz"},
          "/tokenize": {"prompt": "fuzz"},
          "/detokenize": {"tokens": [1, 2]}}


@pytest.fixture(scope="module")
def fields(server) -> dict[str, list[str]]:
    """Request body property names per route, read from the served OpenAPI schema."""
    schema = httpx.get(server.url + "/openapi.json", headers=server.headers).json()
    out = {}
    for path in ROUTES:
        ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        out[path] = list(schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"])
    return out


@st.composite
def bodies(draw, fields: dict[str, list[str]]):
    path = draw(st.sampled_from(sorted(ROUTES)))
    body = dict(ROUTES[path])
    for name in draw(st.lists(st.sampled_from(fields[path]), max_size=4, unique=True)):
        body[name] = draw(MESSAGES if name == "messages" else JSON)
    # keep valid requests short: generation length is not what is under test
    body["max_tokens"] = draw(st.integers(-3, 3) | JSON) if draw(st.booleans()) else 2
    if path == "/v1/generate" or draw(st.booleans()):
        body["stream"] = False
    if draw(st.integers(0, 9)) == 0:
        return path, draw(JSON)  # not even an object
    return path, body


def test_random_bodies_never_5xx(server, client, fields):
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(bodies(fields))
    def check(case):
        path, body = case
        r = client.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
        assert r.status_code < 500, (path, body, r.text)
        if r.status_code >= 400:
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}

    check()
    assert client.get("/health").json()["status"] == "ok"
