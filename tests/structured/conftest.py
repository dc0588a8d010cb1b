"""One real `orcd serve` on loopback with four models: `demo` (orcd/assets/demo.gguf: a 3k-token
Qwen-style vocabulary and the Qwen2.5 chat template, so forced tool calls take the Hermes `<tool_call>`
format), and three with tiny random weights: `think` (a template that opens a `<think>` block in the
prompt), `coder` (a template teaching Qwen3-Coder's XML calls) and `harmony` (a gpt-oss vocabulary and a
Harmony template)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from serve_proc import ServeProcess

from orcd.gguf.synth import write_model_gguf
from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
from orcd.hub import DEMO_MODEL_PATH
from orcd.loading.loader import load_model

API_KEY = "sk-orcd-structured-test"
THINK_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")
TINY = dict(vocab_size=320, hidden=64, n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=4096)


CODER_TEMPLATE = ("{% if tools %}<|im_start|>system\nCall a tool as <tool_call>\n<function=NAME>\n"
                  "<parameter=NAME>\nvalue\n</parameter>\n</function>\n</tool_call><|im_end|>\n{% endif %}"
                  + THINK_TEMPLATE.removesuffix("<think>\n{% endif %}") + "{% endif %}")


def think_model(path, template: str = THINK_TEMPLATE):
    md = synthetic_tokenizer_metadata(TINY["vocab_size"] - 2, "qwen2", seed=3)
    md["tokenizer.ggml.tokens"] += ["<think>", "</think>"]
    md["tokenizer.ggml.token_type"] += [4, 4]  # user-defined, as in Qwen3's files
    md["tokenizer.chat_template"] = template
    return write_model_gguf(path, "qwen2", seed=3, tokenizer_metadata=md, **TINY)


def harmony_model(path):
    """A qwen2 body with a gpt-oss vocabulary and its Harmony template (the prompt ends `<|start|>assistant`;
    <|call|> ends generation)."""
    md = synthetic_tokenizer_metadata(598, "gpt-oss", seed=3)
    return write_model_gguf(path, "qwen2", seed=3, tokenizer_metadata=md, **{**TINY, "vocab_size": 598})


@pytest.fixture(scope="session")
def demo_server(tmp_path_factory) -> Iterator[ServeProcess]:
    d = tmp_path_factory.mktemp("structured")
    think = think_model(d / "think.gguf")
    coder, harmony = think_model(d / "coder.gguf", CODER_TEMPLATE), harmony_model(d / "harmony.gguf")
    srv = ServeProcess(DEMO_MODEL_PATH, d / "serve.log", "--model", f"think={think}", "--model",
                       f"coder={coder}", "--model", f"harmony={harmony}", "--device", "cpu",
                       "--num-kv-blocks", "1024", "--max-num-seqs", "32", env={"ORCD_API_KEY": API_KEY})
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def oai(demo_server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=demo_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The tiny random qwen2 model on the CPU that the engine-level grammar tests run (one thread: tiny ops
    only spin on a busy box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = write_model_gguf(tmp_path_factory.mktemp("g") / "tiny.gguf", "qwen2", vocab_size=320, hidden=64,
                            n_layers=2, ffn=128, n_heads=4, n_kv_heads=2, context_length=1024, seed=3)
    yield load_model(path, "cpu")
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def cuda_model(tmp_path_factory):
    """A small quantized random qwen2 on CUDA (the GPU grammar tests)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from gguf import GGMLQuantizationType as Q

    path = write_model_gguf(tmp_path_factory.mktemp("cuda") / "m.gguf", "qwen2", vocab_size=1024, hidden=256,
                            n_layers=2, ffn=512, n_heads=4, n_kv_heads=2, context_length=1024, tied=False,
                            qtypes={"default": Q.Q8_0, "attn_q": Q.Q5_0, "ffn_down": Q.Q4_K}, seed=2)
    return load_model(path, "cuda")
