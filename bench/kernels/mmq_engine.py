"""Engine A/B for the norm-fused decode step at 5..64 rows (issue 16): decode tok/s of one GGUF file under
named configs, each engine built fresh in this process (bench/peers/orcd_side.py's measure:
LLMEngine.step(), CUDA graphs).

usage: python bench/kernels/mmq_engine.py MODEL.gguf OUT.json [--streams 1,8,32,64] [--gen 128]
                                          [--configs base,fused8,fused64,base]

  base      the code as committed: FusedDecoder's norm-fused step up to its fused_rows() (4 on the 0.5B)
  fusedN    that step up to N rows (FusedDecoder.fused_rows switched here): above GEMV_MAX_N rows its
            q/k/v (RMSNorm, bias), o / down (+ residual) and gate/up (SwiGLU, RMSNorm) products run on
            batched_fused.py (DecodeProducts.qkv switched from fused_gemv3 to three fused_gemv calls there);
            for models whose layers are not on the int8 GEMVs (the 0.5B)
  fusedN-gemv3  the same with q/k/v left on fused_gemv3 (one token per program) above GEMV_MAX_N
A config named twice is measured twice (run-to-run spread). Writes OUT.json ({config: [measure()]})
after each config and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench/peers")]
from orcd_side import measure  # noqa: E402

from orcd.quant.kernels.fused_linear import GEMV_MAX_N, fused_gemv  # noqa: E402
from orcd.runner.fused_decode import FusedDecoder  # noqa: E402

try:  # the norm-fused step's products (helper H3's split of fused_decode.py, session 8)
    from orcd.runner.decode_products import DecodeProducts
except ImportError:  # before it: fusedN is fusedN-gemv3
    DecodeProducts = type("DecodeProducts", (), {"qkv": None})

_ORIG_ROWS = FusedDecoder.fused_rows
_ORIG_QKV = DecodeProducts.qkv


def _qkv_batched(self, lin, res, nrm):
    """DecodeProducts.qkv, with q/k/v on fused_gemv (batched_fused) above GEMV_MAX_N rows."""
    if res.shape[0] <= GEMV_MAX_N:
        return _ORIG_QKV(self, lin, res, nrm)
    return [fused_gemv(res, m.raw, m.out_features, m.in_features, m.qtype, m.bias, norm=nrm)
            for m in lin.qkv()]


def run(model: str, configs: list[str], streams: list[int], gen: int, out: Path) -> dict:
    res: dict = {}
    for name in configs:
        if name.startswith("fused"):
            FusedDecoder.fused_rows = lambda self, n=int(name[5:].split("-")[0]): n
            DecodeProducts.qkv = _ORIG_QKV if name.endswith("-gemv3") else _qkv_batched
        try:
            res.setdefault(name, []).append(measure(model, streams, 128, gen))
        finally:
            FusedDecoder.fused_rows, DecodeProducts.qkv = _ORIG_ROWS, _ORIG_QKV
        out.write_text(json.dumps(res, indent=1))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--configs", default="base,fused8,fused64,base")
    a = ap.parse_args()
    res = run(a.model, a.configs.split(","), [int(s) for s in a.streams.split(",")], a.gen, Path(a.out))
    print(f"{a.model}: decode tok/s")
    for name, runs in res.items():
        for r in runs:
            tps = "".join(f"{c:>5}: {v['decode_tok_s']:>9,.0f}" for c, v in r["decode"].items())
            print(f"{name:<9}{tps}")


if __name__ == "__main__":
    main()
