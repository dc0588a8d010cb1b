"""Every request field the installed official SDKs name (`openai` chat, completions and responses;
`anthropic` messages) is either named in docs/api.md or refused by the server with a 400 naming it: none
is taken silently. A new SDK release that adds a field fails here until docs/api.md says what orcd does."""

from __future__ import annotations

import inspect
from pathlib import Path

import httpx
import pytest

pytest.importorskip("anthropic")
pytest.importorskip("openai")
from anthropic.resources.messages import Messages  # noqa: E402
from openai.resources.chat.completions import Completions as Chat  # noqa: E402
from openai.resources.completions import Completions  # noqa: E402
from openai.resources.responses import Responses  # noqa: E402

DOCS = (Path(__file__).resolve().parents[2] / "docs/api.md").read_text()
CLIENT_ONLY = {"self", "extra_headers", "extra_query", "extra_body", "timeout", "betas"}
MODEL = "tiny-qwen2"
ASK = [{"role": "user", "content": "Hi"}]
ROUTES = {  # route: (the SDK method, a valid body, how an error names its field)
    "/v1/chat/completions": (Chat.create,
                             {"model": MODEL, "messages": ASK, "max_tokens": 2}, "openai"),
    "/v1/completions": (Completions.create,
                        {"model": MODEL, "prompt": "Hi", "max_tokens": 2}, "openai"),
    "/v1/responses": (Responses.create,
                      {"model": MODEL, "input": "Hi", "max_output_tokens": 2}, "openai"),
    "/v1/messages": (Messages.create,
                     {"model": MODEL, "messages": ASK, "max_tokens": 2}, "anthropic"),
}


def undocumented(method) -> list[str]:
    names = [p for p in inspect.signature(method).parameters if p not in CLIENT_ONLY]
    return [n for n in names if f"`{n}`" not in DOCS]


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_sdk_fields_are_documented_or_refused_by_name(server, route):
    method, body, shape = ROUTES[route]
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
        for name in undocumented(method):
            r = c.post(route, json={**body, name: {"x": 1}})
            assert r.status_code == 400, (route, name, r.text)
            err = r.json()["error"]
            assert (err["param"] == name) if shape == "openai" else (name in err["message"]), (route, name)
