import pytest
import torch

from orcd.cli.generate import encode
from orcd.cli.main import main
from orcd.engine.io import EngineRequest
from orcd.engine.llm_engine import LLMEngine
from orcd.engine.sampling_params import SamplingParams
from orcd.gguf.synth import write_model_gguf
from orcd.loading.loader import load_model


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield write_model_gguf(tmp_path_factory.mktemp("gen") / "tiny.gguf", "qwen2", vocab_size=512, hidden=64,
                           n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=256, seed=1)
    torch.set_num_threads(threads)


def engine_text(path, ids, **kw) -> str:
    loaded = load_model(path, "cpu")
    engine = LLMEngine(loaded, num_kv_blocks=32)
    engine.add_request(EngineRequest("t", ids, SamplingParams(**kw)))
    text = ""
    while engine.has_work():
        text += "".join(ev.text for ev in engine.step())
    return text


def generate(capsys, *argv) -> str:
    assert main(["generate", "--device", "cpu", "--quiet", *argv]) == 0
    return capsys.readouterr().out


def test_stdout_is_exactly_the_completion(model_path, capsys):
    out = generate(capsys, "--model", str(model_path), "--max-tokens", "12", "--temperature", "0", "Hi there")
    tok = load_model(model_path, "cpu").tokenizer
    ids = tok.encode_chat([{"role": "user", "content": "Hi there"}])
    assert out == engine_text(model_path, ids, max_tokens=12, temperature=0.0)
    assert out != ""
    raw = generate(capsys, "--model", str(model_path), "--max-tokens", "12", "--temperature", "0", "--raw",
                   "Hi there")
    assert raw == engine_text(model_path, tok.encode_prompt("Hi there"), max_tokens=12, temperature=0.0)


def test_seeded_sampling_repeats_and_stop_strings_cut(model_path, capsys):
    args = ["--model", str(model_path), "--max-tokens", "16", "--seed", "7", "--top-k", "40", "Story:"]
    first = generate(capsys, *args)
    assert generate(capsys, *args) == first
    assert len(first) >= 7
    stop = first[5:7]
    cut = generate(capsys, *args, "--stop", stop)
    assert cut == first[: first.index(stop)]


def test_chat_template_wraps_the_prompt_unless_raw(model_path):
    tok = load_model(model_path, "cpu").tokenizer
    assert tok.has_chat_template
    chat = encode(tok, "Hi", raw=False, system="Be brief.")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert chat == tok.encode_chat(messages)
    assert encode(tok, "Hi", raw=True, system=None) == tok.encode_prompt("Hi")


def test_errors_are_one_line(model_path, capsys):
    assert main(["generate", "--model", str(model_path.parent / "missing.gguf"), "x"]) == 2
    assert main(["generate", "--device", "cpu", "--model", str(model_path), "--max-tokens", "1000", "x"]) == 2
    err = capsys.readouterr().err
    assert "model file not found" in err and "context length of 256" in err


def test_no_overlap_gives_the_same_text(model_path, capsys):
    """--no-overlap runs decode steps one at a time: the same tokens as the default overlap."""
    args = ["--model", str(model_path), "--max-tokens", "20", "--seed", "3", "--repetition-penalty", "1.3",
            "Once"]
    assert generate(capsys, *args, "--no-overlap") == generate(capsys, *args)
