"""R-row decode steps with FusedDecoder's dense route off and on (issue 16, `--dense-batch-rows`): each
step captured in a CUDA graph as the engine runs it (step_rows.py), ms per step, tok/s, kernels per step.

usage: python bench/peers/dense_step.py MODEL.gguf OUT.json [--rows 8,32,64] [--depth 128] [--steps 32]

"quant": the committed step (quantized kernels at every row count); "dense": FusedDecoder(dense=...), every
product of the step a cuBLAS GEMM over dense copies of the weights (made once here, in the model dtype;
their device bytes are printed). Same model, same KV cache, same inputs for both. CUDA only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from kernel_table import print_rows  # noqa: E402
from step_rows import blocks_needed, profile_rows  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--rows", default="8,32,64", help="comma list of batch rows")
    ap.add_argument("--depth", type=int, default=128, help="tokens already in each sequence")
    ap.add_argument("--steps", type=int, default=32, help="timed graph replays per step")
    a = ap.parse_args()
    from orcd.cli.bench_session import OrcdSession
    from orcd.runner.fused_decode import dense_copies

    rows, page = [int(r) for r in a.rows.split(",")], 16
    s = OrcdSession(a.model, num_blocks=blocks_needed(max(rows), a.depth, page), page=page)
    t0 = time.perf_counter()
    dense = dense_copies(s.model, 1)
    torch.cuda.synchronize()
    made_s = time.perf_counter() - t0
    print(f"weights {s.loaded.weights_bytes / 2**30:.2f} GiB quantized + {dense.nbytes / 2**30:.2f} GiB "
          f"dense copies (made in {made_s:.1f} s); allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB")
    res = []
    for r in rows:
        for row in profile_rows(s.model, s.kv, page, s.vocab, r, a.depth, a.steps,
                                {"quant": {}, "dense": {"dense": dense}}):
            res.append(row)
            print(f"\n{r} rows, {row['switch']}: {row['ms_per_step']:.3f} ms/step, {row['tok_s']:,.0f} tok/s")
            print_rows(row["kernels"], "step", 8, 90)
    with open(a.out, "w") as f:
        json.dump({"model": a.model, "device": torch.cuda.get_device_name(), "depth": a.depth,
                   "weights_bytes": s.loaded.weights_bytes, "dense_weights_bytes": dense.nbytes,
                   "dense_made_s": made_s, "rows": res, "time": time.strftime("%Y-%m-%d %H:%M:%S")},
                  f, indent=1)
    print("\nrows  quant ms  dense ms  quant tok/s  dense tok/s")
    by = {(row["rows"], row["switch"]): row for row in res}
    for r in rows:
        q, d = by[(r, "quant")], by[(r, "dense")]
        print(f"{r:4d}  {q['ms_per_step']:8.3f}  {d['ms_per_step']:8.3f}  {q['tok_s']:11,.0f}  "
              f"{d['tok_s']:11,.0f}")


if __name__ == "__main__":
    main()
