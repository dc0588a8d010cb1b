"""The anti-cheat haiku test: a running `orcd serve` must write a haiku holding this minute's word.

The word ("thirty-one" at hh:31) is computed when the test runs and the prompt carries a random
nonce, so no canned answer can pass; generation goes through the server's /v1/generate SSE stream
at temperature 0.8. Three seeds must give the word every time and at least two different haikus;
the same seed twice must give the same haiku. It runs on the bundled demo model, on the file that
ORCD_HAIKU_MODEL names (e.g. Qwen2.5-0.5B-Instruct Q4_K_M; skipped when unset), and once on a copy
of the demo model with perturbed weights, where the check must fail.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import re
import secrets
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
from serve_proc import ServeProcess

DEMO_MODEL = Path(__file__).resolve().parents[2] / "orcd" / "assets" / "demo.gguf"
PROMPT = 'Write a haiku about GPU computing that includes the word "{word}"\n(request {nonce})'
ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen").split()
TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty"}


def minute_word(minute: int) -> str:
    """0 -> "zero", 31 -> "thirty-one"."""
    if minute < 20:
        return ONES[minute]
    tens, ones = divmod(minute, 10)
    return TENS[tens] + ("" if ones == 0 else "-" + ONES[ones])


def has_word(text: str, word: str) -> bool:
    """`word` as a whole word: no letter, digit, '_' or '-' on either side; any case."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text, re.IGNORECASE) is not None


def generate(url: str, prompt: str, seed: int) -> str:
    """One chat generation through the /v1/generate SSE stream; the concatenated token texts."""
    body = {"prompt": prompt, "chat": True, "temperature": 0.8, "seed": seed, "max_tokens": 64}
    text, event, end = [], None, None
    with httpx.stream("POST", url + "/v1/generate", json=body, timeout=300) as resp:
        assert resp.status_code == 200, resp.read().decode(errors="replace")
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("event:"):
                event = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data = json.loads(line[len("data:"):])
                assert event != "error", f"generation failed: {data}"
                if event == "token":
                    text.append(data["t"])
                elif event == "end":
                    end = data
    assert end is not None and end["stop_reason"] in ("eos", "length"), f"stream ended without `end`: {end}"
    return "".join(text).strip()


def check_haiku(url: str) -> list[str]:
    """The acceptance check; raises AssertionError naming what failed. Returns the three haikus."""
    word = minute_word(datetime.datetime.now().minute)
    prompt = PROMPT.format(word=word, nonce=secrets.token_hex(4))
    seeds = random.SystemRandom().sample(range(1, 2**31), 3)
    haikus = [generate(url, prompt, seed) for seed in seeds]
    for seed, haiku in zip(seeds, haikus, strict=True):
        print(f"--- seed {seed}, word {word!r}:\n{haiku}")
        assert has_word(haiku, word), f"{word!r} is not in the haiku for seed {seed}: {haiku!r}"
    assert len(set(haikus)) >= 2, f"three seeds gave one haiku: {haikus[0]!r}"
    again = generate(url, prompt, seeds[0])
    assert again == haikus[0], f"seed {seeds[0]} gave two haikus: {haikus[0]!r} / {again!r}"
    return haikus


@pytest.fixture()
def serve(tmp_path):
    servers = []

    def start(model: Path) -> str:
        # device auto: a real GGUF given by ORCD_HAIKU_MODEL may run on the GPU; no API key
        server = ServeProcess(model, tmp_path / f"serve{len(servers)}.log", "--num-kv-blocks", "128",
                              env={"ORCD_API_KEY": None})
        servers.append(server)
        server.wait_ready(timeout=300.0)
        return server.url

    yield start
    for server in servers:
        server.stop()


def test_haiku_demo_model(serve):
    check_haiku(serve(DEMO_MODEL))


def test_haiku_orcd_haiku_model(serve):
    path = os.environ.get("ORCD_HAIKU_MODEL")
    if not path:
        pytest.skip("ORCD_HAIKU_MODEL is not set: point it at a chat GGUF (e.g. Qwen2.5-0.5B-Instruct "
                    "Q4_K_M) to run the haiku test on it")
    check_haiku(serve(Path(path)))


def perturb_weights(path: Path, scale: float = 4.0, seed: int = 0) -> int:
    """Add Gaussian noise of `scale` times each F16 matrix's own spread, in place; returns tensors touched.

    Measured on the demo model (100 samples each, transformers): the word still appears in 13% of
    haikus at scale 1, 0% at scales 2 and 4 -- so at 4 the check's three samples cannot all pass by chance.
    """
    import gguf

    reader = gguf.GGUFReader(path, "r+")
    rng = np.random.default_rng(seed)
    touched = 0
    for tensor in reader.tensors:
        if tensor.tensor_type != gguf.GGMLQuantizationType.F16 or len(tensor.shape) != 2:
            continue
        w = tensor.data.astype(np.float32)
        tensor.data[...] = (w + rng.normal(0.0, scale * float(w.std()), w.shape)).astype(np.float16)
        touched += 1
    reader.data.flush()
    return touched


def test_haiku_check_fails_on_perturbed_weights(serve, tmp_path):
    broken = tmp_path / "perturbed.gguf"
    shutil.copyfile(DEMO_MODEL, broken)
    assert perturb_weights(broken) > 0
    assert broken.read_bytes() != DEMO_MODEL.read_bytes()
    with pytest.raises(AssertionError, match="is not in the haiku"):
        check_haiku(serve(broken))
