"""Several models in one `orcd serve` (issue 19, part 2), on real HTTP over loopback: routing by `model`,
LRU unloading under --max-loaded-models 1 without losing requests, unload while busy waits, idle
unloading, the load/unload routes, unknown models, per-model metrics, the official openai client."""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from server_helpers import LONG, TINY, ServerProc, generate_events, metric, sse_blocks

from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model

BODY = {"prompt": "Once upon a time", "max_tokens": 12, "ignore_eos": True, "temperature": 0.8, "seed": 7,
        "stream": False}


@pytest.fixture(scope="module")
def model_b(tmp_path_factory):
    return write_model_gguf(tmp_path_factory.mktemp("b") / "tiny-b.gguf", "qwen2", seed=5, **TINY)


@pytest.fixture(scope="module")
def pool(tiny_model, model_b, tmp_path_factory):
    """Models `a` (the single-model tests' file) and `b` (other weights), one loaded at a time."""
    log = tmp_path_factory.mktemp("log") / "pool.log"
    srv = ServerProc(f"a={tiny_model}", log, "--model", f"b={model_b}", "--max-loaded-models", "1",
                     "--max-num-seqs", "4", "--ping-interval", "0.05")
    try:
        srv.wait_ready()
        yield srv
    finally:
        assert srv.stop() == 0, srv.log()


@pytest.fixture()
def pc(pool):
    with httpx.Client(base_url=pool.url, headers=pool.headers, timeout=60) as c:
        yield c


def card_error(c: httpx.Client) -> str:
    return "model 'broken' could not be loaded: " + c.get("/v1/models/broken").json()["status"]["error"]


def states(c: httpx.Client) -> dict[str, str]:
    return {m["id"]: m["status"]["value"] for m in c.get("/v1/models").json()["data"]}


def gen(c: httpx.Client, model: str | None, **over) -> dict:
    body = {**BODY, **over} if model is None else {**BODY, "model": model, **over}
    r = c.post("/v1/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_listed_loaded_or_not(pc):
    listing = pc.get("/v1/models").json()
    assert [m["id"] for m in listing["data"]] == ["a", "b"]
    assert all(m["status"]["value"] in ("unloaded", "loaded") for m in listing["data"])
    assert pc.get("/models").json()["data"] == listing["data"]  # llama.cpp router mode's listing
    assert pc.get("/v1/models/b").json()["id"] == "b"


def engine_alone(path) -> list[int]:
    """BODY's tokens from the model file alone, through LLMEngine in this process."""
    loaded = load_model(path, device="cpu")
    engine = LLMEngine(loaded, num_kv_blocks=64)
    params = SamplingParams(max_tokens=BODY["max_tokens"], temperature=BODY["temperature"], seed=BODY["seed"],
                            ignore_eos=True)
    engine.add_request(EngineRequest("r", loaded.tokenizer.encode_prompt(BODY["prompt"]), params))
    ids: list[int] = []
    while engine.has_work():
        ids += [ev.token_id for ev in engine.step() if ev.token_id is not None]
    return ids


def test_routed_by_model_same_output_as_alone(pc, client, model_b):
    alone = client.post("/v1/generate", json=BODY).json()  # the single-model server, same file as `a`
    a, b = gen(pc, "a"), gen(pc, "b")
    assert a["model"] == "a" and b["model"] == "b"
    assert a["token_ids"] == alone["token_ids"] and a["text"] == alone["text"]
    assert b["token_ids"] == engine_alone(model_b) != a["token_ids"]
    assert gen(pc, None)["token_ids"] == a["token_ids"]  # no model: the first one
    messages = [{"role": "user", "content": "hi"}]
    chat = pc.post("/v1/chat/completions", json={"model": "b", "messages": messages, "max_tokens": 4}).json()
    assert chat["model"] == "b" and chat["usage"]["completion_tokens"] <= 4
    assert pc.post("/tokenize", json={"model": "b", "prompt": "hi"}).json()["count"] >= 1


def test_lru_unloads_under_the_limit(pc):
    gen(pc, "a")
    assert states(pc) == {"a": "loaded", "b": "unloaded"}
    before = metric(pc.get("/metrics").text, 'orcd_model_unloads_total{model="a",reason="lru"}')
    gen(pc, "b")
    assert states(pc) == {"a": "unloaded", "b": "loaded"}
    text = pc.get("/metrics").text
    assert metric(text, 'orcd_model_unloads_total{model="a",reason="lru"}') == before + 1
    assert metric(text, 'orcd_model_loaded{model="b"}') == 1
    assert metric(text, 'orcd_model_loaded{model="a"}') == 0
    assert metric(text, 'orcd_model_requests_total{model="b",outcome="length",route="generate"}') >= 1
    health = pc.get("/health").json()
    assert health["status"] == "ok" and {m["id"]: m["status"] for m in health["models"]} == states(pc)


def test_concurrent_requests_to_both_lose_nothing(pc):
    """Twelve requests at once, alternating models, with room for one model: all finish, each with its
    model's own tokens (the same as sequentially)."""
    expect = {m: gen(pc, m)["token_ids"] for m in ("a", "b")}

    def one(i: int) -> tuple[str, dict]:
        model = "ab"[i % 2]
        with httpx.Client(base_url=pc.base_url, headers=pc.headers, timeout=60) as c:
            if i % 4 < 2:
                return model, gen(c, model)
            with c.stream("POST", "/v1/generate", json={**BODY, "model": model, "stream": True}) as r:
                events = list(generate_events(r))
            ids = [e["id"] for kind, e in events if kind == "token" and e["id"] is not None]
            return model, {"token_ids": ids, "stop_reason": events[-1][1]["stop_reason"]}

    with ThreadPoolExecutor(12) as ex:
        results = list(ex.map(one, range(12)))
    for model, out in results:
        assert out["stop_reason"] == "length" and out["token_ids"] == expect[model]
    assert pc.get("/health").json()["active_requests"] == 0


def test_unload_while_busy_waits(pc):
    done: dict = {}
    with pc.stream("POST", "/v1/generate", json={"prompt": "x", "model": "a", "max_tokens": LONG,
                                                 "ignore_eos": True, "request_id": "busy-a"}) as r:
        events = generate_events(r)
        assert next(events)[0] == "started" and next(events)[0] == "token"
        unload = lambda: done.update(r=pc.post("/models/unload", json={"model": "a"}))  # noqa: E731
        worker = threading.Thread(target=unload)
        worker.start()
        time.sleep(0.5)
        assert worker.is_alive() and states(pc)["a"] == "loaded"  # waits for the request in flight
        assert pc.post("/v1/cancel", json={"request_id": "busy-a"}).json()["cancelled"]
        rest = list(events)
    worker.join(30)
    assert rest[-1][1]["stop_reason"] == "cancelled"
    assert done["r"].json() == {"success": True, "model": "a", "status": {"value": "unloaded"}}
    assert states(pc)["a"] == "unloaded"


def test_a_stream_waiting_for_its_model_gets_pings(pc):
    """`b` needs `a`'s place, and `a` is busy: b's stream starts at once and pings until it runs."""
    assert pc.post("/models/load", json={"model": "a"}).json()["success"]
    out: dict = {}

    def stream_b() -> None:
        with httpx.Client(base_url=pc.base_url, headers=pc.headers, timeout=60) as c:
            messages = [{"role": "user", "content": "hi"}]
            body = {"model": "b", "messages": messages, "max_tokens": 4, "stream": True}
            with c.stream("POST", "/v1/chat/completions", json=body) as r:
                out["blocks"] = list(sse_blocks(r))

    with pc.stream("POST", "/v1/generate", json={"prompt": "x", "model": "a", "max_tokens": LONG,
                                                 "ignore_eos": True, "request_id": "hold-a"}) as r:
        events = generate_events(r)
        assert next(events)[0] == "started" and next(events)[0] == "token"
        waiter = threading.Thread(target=stream_b)
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive()
        assert pc.post("/v1/cancel", json={"request_id": "hold-a"}).json()["cancelled"]
        list(events)
    waiter.join(30)
    blocks = out["blocks"]
    first_data = next(i for i, (kind, _) in enumerate(blocks) if kind != "comment")
    assert first_data >= 3 and all(b == ("comment", "ping") for b in blocks[:first_data])
    assert blocks[-1] == ("message", "[DONE]") and '"model":"b"' in blocks[first_data][1]


def test_disconnect_releases_the_model(pc):
    with pc.stream("POST", "/v1/generate", json={"prompt": "x", "model": "b", "max_tokens": LONG,
                                                 "ignore_eos": True}) as r:
        events = generate_events(r)
        assert next(events)[0] == "started" and next(events)[0] == "token"
    r = pc.post("/v1/models/b/unload", timeout=10)  # the client left: nothing in flight holds `b`
    assert r.status_code == 200 and r.json()["status"]["value"] == "unloaded"


def test_load_and_unload_routes(pc):
    r = pc.post("/models/load", json={"model": "b"})
    assert r.json() == {"success": True, "model": "b", "status": {"value": "loaded"}}
    assert pc.post("/v1/models/a/load").json()["status"]["value"] == "loaded"
    assert states(pc) == {"a": "loaded", "b": "unloaded"}
    assert pc.post("/v1/models/a/unload").json()["status"]["value"] == "unloaded"
    assert pc.post("/models/unload", json={"model": "a"}).json()["success"]  # already unloaded
    for r in (pc.post("/models/load", json={"model": "nope"}), pc.post("/v1/models/nope/unload")):
        assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    with httpx.Client(base_url=pc.base_url, timeout=10) as anon:  # behind the API key
        assert anon.post("/models/load", json={"model": "a"}).status_code == 401


def test_unknown_model_is_404_naming_model(pc):
    for path, body in (("/v1/generate", {"prompt": "x"}), ("/v1/completions", {"prompt": "x"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        r = pc.post(path, json={**body, "model": "gpt-4o"})
        err = r.json()["error"]
        assert r.status_code == 404 and err["param"] == "model" and err["code"] == "model_not_found"
        assert "'gpt-4o'" in err["message"] and "'a', 'b'" in err["message"]


def test_openai_client_lists_and_calls_each(pool):
    oai = openai.OpenAI(base_url=pool.url + "/v1", api_key=pool.api_key, max_retries=0, timeout=60)
    assert [m.id for m in oai.models.list()] == ["a", "b"]
    texts = {}
    for model in ("a", "b"):
        out = oai.completions.create(model=model, prompt="Once upon a time", max_tokens=12, seed=7,
                                     temperature=0.8, extra_body={"ignore_eos": True})
        assert out.model == model and out.usage.completion_tokens == 12
        texts[model] = out.choices[0].text
        chat = oai.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=3, stream=True)
        assert any(c.choices and c.choices[0].finish_reason for c in chat)
    assert texts["a"] != texts["b"]
    with pytest.raises(openai.NotFoundError):
        oai.completions.create(model="nope", prompt="x", max_tokens=1)


def test_models_dir_idle_unload_and_a_broken_file(tiny_model, model_b, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(tiny_model, folder / "alpha.gguf")
    shutil.copy(model_b, folder / "beta.gguf")
    (folder / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    # in-process engines: a 0.5 s idle timeout assumes a load shorter than that (an engine process's
    # start takes seconds on the CPU box, and beta would be unloaded while alpha loads)
    srv = ServerProc(folder / "alpha.gguf", tmp_path / "serve.log", "--models-dir", str(folder),
                     "--model-idle-timeout", "0.5", "--no-engine-process", api_key=None)
    try:
        srv.wait_ready()
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["alpha", "beta", "broken"]
            assert states(c) == {"alpha": "unloaded", "beta": "unloaded", "broken": "unloaded"}
            assert gen(c, "beta")["model"] == "beta" and gen(c, "alpha")["model"] == "alpha"
            # not "both loaded now": on a loaded box alpha's load can outlast beta's 0.5 s of idleness
            assert states(c)["broken"] == "unloaded"
            deadline = time.monotonic() + 15
            while states(c) != {"alpha": "unloaded", "beta": "unloaded", "broken": "unloaded"}:
                assert time.monotonic() < deadline, states(c)
                time.sleep(0.1)
            text = c.get("/metrics").text
            for name in ("alpha", "beta"):  # each loaded once (it served) and went idle once
                assert metric(text, f'orcd_model_loads_total{{model="{name}",outcome="ok"}}') == 1
                assert metric(text, f'orcd_model_unloads_total{{model="{name}",reason="idle"}}') == 1
            r = c.post("/v1/generate", json={**BODY, "model": "broken"})
            assert r.status_code == 500 and r.json()["error"]["code"] == "model_load_failed"
            with c.stream("POST", "/v1/generate", json={**BODY, "model": "broken", "stream": True}) as r:
                assert r.status_code == 200  # streamed: the failure arrives as the stream's error event
                last = list(generate_events(r))[-1]
            assert last == ("error", {"code": "model_load_failed", "message": card_error(c)})
            card = c.get("/v1/models/broken").json()
            assert card["status"]["value"] == "unloaded" and card["status"]["failed"]
            assert gen(c, "alpha")["tokens_out"] == 12  # a failed load leaves the others serving
    finally:
        assert srv.stop() == 0, srv.log()
