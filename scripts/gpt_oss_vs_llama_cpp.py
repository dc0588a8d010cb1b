"""orcd vs llama.cpp on tiny random gpt-oss files (CPU): last-position logits, relative error per prompt.

Needs llama-cpp-python (built from its sdist, ~20 min on 2 cores; not a test dependency):
    pip install --no-deps --target /tmp/llcpp_pkg llama-cpp-python==0.3.36
    pip install --target /tmp/llcpp_pkg diskcache
    PYTHONPATH=/tmp/llcpp_pkg python scripts/gpt_oss_vs_llama_cpp.py

llama.cpp runs with an F32 KV cache and no flash attention, so only the model differs. Two files: F32
everywhere (every op exact in both), and MXFP4 experts (llama.cpp quantizes the activations to Q8_0 for
its MXFP4 dot products: ~1e-2 expected). Each is compared twice: orcd's YaRN as gpt-oss defines it (HF
`truncate: false`, what orcd runs), and with the ramp bounds rounded as llama.cpp rounds them.
Measured (session of issue 20): F32 file 3e-7..5e-7 with rounding, up to 2e-2 without (a 30-token
prompt); MXFP4 file 7e-3..4e-2 either way.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

DIMS = dict(vocab_size=320, hidden=64, n_layers=4, ffn=64, n_heads=4, n_kv_heads=2, head_dim=32, n_experts=4,
            n_experts_used=2, sliding_window=8, context_length=8192, yarn_factor=32.0, yarn_orig_context=256)
PROMPTS = [[7, 100, 42, 3, 250, 11, 19, 64, 5, 17, 33, 2, 90, 91, 92, 93, 8, 200, 5], [1, 2, 3],
           list(range(40, 70))]


def orcd_logits(path: Path, ids: list[int], rounded_yarn: bool):
    """Last-position logits [V] of one prompt, orcd on the CPU in fp32."""
    import torch

    import orcd.models.gpt_oss as gpt_oss
    from orcd.engine.io import ScheduledSeq, SchedulerOutput
    from orcd.engine.sampling_params import SamplingParams
    from orcd.loading.loader import load_model
    from orcd.runner.model_runner import ModelRunner

    exact = gpt_oss.yarn_inv_freq
    gpt_oss.yarn_inv_freq = lambda *a, **k: exact(*a[:6], truncate=rounded_yarn)
    try:
        runner = ModelRunner(load_model(path, device="cpu", dtype=torch.float32, tokenizer=False), 64, 4)
    finally:
        gpt_oss.yarn_inv_freq = exact
    seq = ScheduledSeq(0, ids, 0, list(range(-(-len(ids) // 4))), True, SamplingParams(temperature=0.0))
    return runner.forward(SchedulerOutput([seq], len(ids)))[0]


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    import numpy as np
    import torch
    from gguf import GGMLQuantizationType as Q
    from llama_cpp import Llama

    from orcd.gguf.synth_gpt_oss import write_gpt_oss_gguf

    experts = dict.fromkeys(("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), Q.MXFP4)
    with tempfile.TemporaryDirectory() as tmp:
        for name, qtypes in {"f32": {"default": Q.F32}, "mxfp4": {"default": Q.F32} | experts}.items():
            path = write_gpt_oss_gguf(Path(tmp) / f"{name}.gguf", qtypes=qtypes, seed=5, **DIMS)
            llm = Llama(str(path), n_ctx=256, logits_all=True, n_threads=2, verbose=False, n_batch=64,
                        type_k=0, type_v=0, flash_attn=False)  # F32 KV cache (ggml type 0)
            for rounded in (False, True):
                errs = []
                for ids in PROMPTS:
                    llm.reset()
                    llm.eval(ids)
                    want = torch.tensor(np.array(llm.scores[len(ids) - 1]))
                    got = orcd_logits(path, ids, rounded)
                    errs.append(f"{((got - want).norm() / want.norm()).item():.1e}")
                label = "yarn rounded as llama.cpp" if rounded else "yarn as gpt-oss (HF truncate=false)"
                print(f"{name:6s} {label:36s} rel. error per prompt: {', '.join(errs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
