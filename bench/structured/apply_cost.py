"""Device time of applying the grammar bitmask to logits [k, V]: the words unpacked by shifting each by
0..31 (orcd.structured.mask.bits_shift, the CUDA path) against a 256 x 8 byte table (one gather, fewer
bytes moved), each followed by the same `where`. Both give the same allowed set (checked). On the H100 the
table was slower (0.146 vs 0.124 ms at 64 rows, 0.146 vs 0.088 at 8), so the shifts stay. Not a test.

    python bench/structured/apply_cost.py [--rows 8,64] [--vocab 151936] [--iters 200]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from orcd.structured.mask import bits_shift


def bits_lut(bitmask: torch.Tensor) -> torch.Tensor:
    """bitmask [k, W] int32 -> [k, 32W] bool through a 256 x 8 table: each byte of the words
    (little-endian: token 32w + 8b + j is bit j of byte b of word w) indexes its 8 bits."""
    k, w = bitmask.shape
    dev = bitmask.device
    table = ((torch.arange(256, dtype=torch.int32, device=dev)[:, None]
              >> torch.arange(8, dtype=torch.int32, device=dev)) & 1).bool()  # [256, 8]
    return table[bitmask.contiguous().view(torch.uint8).int()].view(k, 32 * w)


def device_ms(fn, iters: int) -> float:
    """Mean device ms of fn() over iters calls (CUDA events), after 10 warm-up calls."""
    for _ in range(10):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="8,64")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    out = []
    for k in [int(r) for r in args.rows.split(",")]:
        w = (args.vocab + 31) // 32
        gen = torch.Generator().manual_seed(k)
        bitmask = torch.randint(-2**31, 2**31 - 1, (k, w), generator=gen, dtype=torch.int64).to(torch.int32)
        bitmask = bitmask.cuda()
        logits = torch.randn(k, args.vocab, device="cuda")
        assert torch.equal(bits_lut(bitmask), bits_shift(bitmask))
        row = {"rows": k, "vocab": args.vocab, "device": torch.cuda.get_device_name()}
        for name, bits in (("shift", bits_shift), ("table", bits_lut)):
            def apply(b=bits, bm=bitmask, lg=logits):
                return lg.where(b(bm)[:, :args.vocab], float("-inf"))
            row[f"{name}_ms"] = device_ms(apply, args.iters)
        out.append(row)
        print(f"rows {k:3d}: shift + where {row['shift_ms']:.4f} ms, table + where {row['table_ms']:.4f} ms",
              flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
