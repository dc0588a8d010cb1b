"""GET /v1/models/{id}, POST /tokenize and POST /detokenize on the real server."""

from __future__ import annotations

import openai
import pytest

MODEL = "tiny-qwen2"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]


def test_retrieve_model(oai):
    card = oai.models.retrieve(MODEL)
    assert card.id == MODEL and card.owned_by == "orcd"
    with pytest.raises(openai.NotFoundError) as exc:
        oai.models.retrieve("gpt-4o")
    assert exc.value.body["code"] == "model_not_found"


def test_tokenize_counts_what_generation_counts(client, oai):
    prompt = "Once upon a time, in a land far away"
    tok = client.post("/tokenize", json={"model": MODEL, "prompt": prompt}).json()
    used = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=1).usage.prompt_tokens
    assert tok["count"] == len(tok["tokens"]) == used and tok["max_model_len"] == 32768
    chat = client.post("/tokenize", json={"messages": MESSAGES}).json()
    assert chat["count"] == oai.chat.completions.create(model=MODEL, messages=MESSAGES,
                                                        max_tokens=1).usage.prompt_tokens
    bare = client.post("/tokenize", json={"messages": MESSAGES, "add_generation_prompt": False}).json()
    assert bare["count"] < chat["count"] and chat["tokens"][: bare["count"]] == bare["tokens"]


def test_detokenize_round_trip(client):
    text = "Round trip: café, 日本, emoji 🙂."
    ids = client.post("/tokenize", json={"prompt": text, "add_special_tokens": False}).json()["tokens"]
    assert client.post("/detokenize", json={"tokens": ids}).json() == {"prompt": text}


@pytest.mark.parametrize("path, body, param", [
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": "a", "messages": MESSAGES}, "prompt"),
    ("/tokenize", {"prompt": 5}, "prompt"),
    ("/tokenize", {"prompt": "a", "model": "other"}, "model"),
    ("/detokenize", {"tokens": [1, 99999]}, "tokens.1"),
    ("/detokenize", {"tokens": ["1"]}, "tokens.0"),
])
def test_bad_tokenize_requests(client, path, body, param):
    r = client.post(path, json=body)
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"]["param"] == param
