"""Run under TRITON_INTERPRET=1 (by test_q6k_split_mm.py): FusedDecoder's decode step over a tiny qwen2
(fp16, int8 x on) whose attn_v, ffn_down and output are Q6_K, once with the GGUF blocks and once after
apply_q6k_layout(model, "split"): one step of 6 rows (the unfused step: batched_qkv with v split,
split_linear's products for down and the head). Prints `name 0 0` where the logits are equal
(torch.equal), `name inf 0` where not."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1"

import torch  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
from decode_meta import decode_meta  # noqa: E402

from orcd.gguf.synth import write_model_gguf  # noqa: E402
from orcd.loading.loader import load_model  # noqa: E402
from orcd.loading.q6k_layout import apply_q6k_layout  # noqa: E402
from orcd.models.kv_cache import KVCache  # noqa: E402
from orcd.runner.fused_decode import FusedDecoder  # noqa: E402

PAGE = 16
# the unfused step; the int8 one (<= 4 rows) takes ~2 min under the interpreter: its kernels are
# checked one by one (interp_q6k_split.py)
ROWS = (6,)
DIMS = dict(vocab_size=320, hidden=256, n_layers=2, ffn=512, n_heads=4, n_kv_heads=2)
TYPES = {"default": Q.Q4_K, "attn_v": Q.Q6_K, "ffn_down": Q.Q6_K, "output": Q.Q6_K, "token_embd": Q.Q8_0}


@torch.inference_mode()
def logits(dec: FusedDecoder, cfg, batch: int, steps: int) -> list[torch.Tensor]:
    """`steps` decode steps of `batch` sequences from position 0 (the same ids whatever the decoder)."""
    kv = KVCache.allocate(cfg, batch * 2, PAGE, "cpu", torch.float16)
    tables = torch.arange(batch * 2, dtype=torch.int32).view(batch, 2)
    gen = torch.Generator().manual_seed(batch)
    pos, out = torch.zeros(batch, dtype=torch.int64), []
    for _ in range(steps):
        ids = torch.randint(0, cfg.vocab_size, (batch,), generator=gen)
        meta = decode_meta(pos, tables, PAGE)
        out.append(dec(ids, pos, meta, kv))
        pos = pos + 1
    return out


def main(path: Path) -> None:
    write_model_gguf(path, "qwen2", tied=False, qtypes=TYPES, seed=5, **DIMS)
    got = {}
    for layout in ("gguf", "split"):
        loaded = load_model(str(path), "cpu", dtype=torch.float16, keep_quantized=True, tokenizer=False)
        if layout == "split":
            assert apply_q6k_layout(loaded.model, "split") == 5  # v and down of 2 blocks, the head
        dec = FusedDecoder(loaded.model)
        assert dec.int8_x and dec.fuse_norm and dec.fused_rows() < 6
        got[layout] = {b: logits(dec, loaded.cfg, b, 1) for b in ROWS}
    for b in ROWS:
        same = all(torch.equal(s, g) and bool(torch.isfinite(g).all())
                   for s, g in zip(got["split"][b], got["gguf"][b], strict=True))
        print(f"decoder_rows{b}", "0" if same else "inf", 0, flush=True)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp) / "m.gguf")
    sys.exit(0)
