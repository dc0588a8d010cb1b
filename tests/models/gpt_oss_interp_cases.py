"""The tiny gpt-oss file through the kernel paths on the CPU (run under TRITON_INTERPRET=1 by
test_gpt_oss_parts.py): MXFP4 experts split for the Triton MoE kernels, the residual adds fused into the
norms (decode_ops.add_rmsnorm). Prints `name value tol`:
- logits-*: last-position logits vs HF transformers (relative error) for a short prompt;
- moe-invariant-*: with batch_invariant set, a token's MoE output alone vs inside a 20-token batch (max abs
  difference; 0 means bitwise), and without it the 20-token batch goes the grouped path (printed only).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_gpt_oss import hf_gpt_oss  # noqa: E402
from models_helpers import hf_last_logits, orcd_last_logits, rel_err  # noqa: E402
from test_gpt_oss import DIMS, PROMPTS, QTYPES  # noqa: E402

from orcd.gguf.synth_gpt_oss import write_gpt_oss_gguf  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.numerics import invariant_layers, set_batch_invariant  # noqa: E402
from orcd.runner.model_runner import ModelRunner  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        path = write_gpt_oss_gguf(Path(d) / "tiny.gguf", qtypes=QTYPES, seed=5, **DIMS)
        loaded = load_model(path, device="cpu", dtype=torch.float32, tokenizer=False, keep_quantized=False)
        hf = hf_gpt_oss(path)
    moe = loaded.model.blocks[0].moe
    assert moe.fused(), "MXFP4 experts should be split for the kernels under the interpreter"
    runner = ModelRunner(loaded, num_kv_blocks=64, block_size=4)
    for i in (1,):  # 3 tokens: the GEMV path (the grouped one: moe_cases.py, and the invariance check)
        err = rel_err(orcd_last_logits(runner, PROMPTS[i]), hf_last_logits(hf, PROMPTS[i]))
        print(f"logits-prompt{i} {err:.3e} 1e-4")
    x = torch.randn(20, DIMS["hidden"], generator=torch.Generator().manual_seed(0))  # 40 pairs: grouped
    layers = invariant_layers(loaded.model)
    assert moe in layers
    for on in (True, False):
        set_batch_invariant(layers, on)
        diff = (moe(x)[2:3] - moe(x[2:3])).abs().max().item()
        print(f"moe-invariant-{'on' if on else 'off'} {diff:.3e} {1e-30 if on else 'inf'}")


if __name__ == "__main__":
    main()
