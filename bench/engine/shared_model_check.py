"""Engines sharing one model on CUDA: checks of the fix for the prefill graphs captured on the batch-invariant
kernels (the illegal memory access of test_engine_gpu [2048-4096-graphs-seeded] after [...-graphs-all]).

usage: python bench/engine/shared_model_check.py [--out-dir DIR]   (one GPU, triton; run from the repo root
with the repo on PYTHONPATH: the checks import tests/)

Rows of the table printed last:
- probe: does this torch refuse a pageable non-blocking host -> device copy inside a CUDA graph capture
  ("refused"), or capture it as a memcpy that every replay re-reads from the host address ("captured")?
  The batch-invariant attention copies its prefill tile lists that way (attention_invariant._tiles).
- old path (a child process): PrefillGraphs._step and attention_invariant._tiles as before the fix, an
  engine built on the model after a batch_invariant="all" engine left its layers on: its prefill graphs
  capture the invariant attention. Expected: "captured" -> errors or wrong tokens; "refused" -> the capture
  fails, prefill runs eagerly (then this is not what crashed).
- the fixed tree: tests/runner/test_shared_model_gpu.py and test_engine_gpu.py's 2048-4096 graphs cases
  (graphs-all, then graphs-seeded: the failing order).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

PYTEST = ["-m", "pytest", "-x", "-q", "-m", "gpu", "-p", "no:cacheprovider"]
TESTS = [("fixed: test_shared_model_gpu", ["tests/runner/test_shared_model_gpu.py"]),
         ("fixed: test_engine_gpu 2048-4096 graphs-all, graphs-seeded",
          ["tests/engine/test_engine_gpu.py", "-k", "2048-4096 and graphs"])]


def probe() -> str:
    """Capture `torch.tensor(list).to(cuda, non_blocking=True)`, as _tiles did inside a prefill graph."""
    import torch

    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            torch.tensor([1, 2, 3], dtype=torch.int32).to("cuda", non_blocking=True)
    except RuntimeError as err:
        return "refused: " + str(err).splitlines()[0][:80]
    return "captured (replays re-read the freed host list)"


def old_tiles(meta, n_rows, device):
    """attention_invariant._tiles before the fix: host-built tile lists even inside a capture."""
    import torch

    from orcd.models.layers.attention_invariant import BQ

    if meta.cache is not None and "inv_tiles" in meta.cache:
        return meta.cache["inv_tiles"]
    n_seqs = meta.seq_lens.shape[0]
    if meta.max_query_len == 1 and n_rows == n_seqs:
        seq = torch.arange(n_seqs, dtype=torch.int32, device=device)
        res = (seq, seq)
    else:
        cu, _ = meta.host_lists()
        pairs = [(b, r) for b in range(len(cu) - 1) for r in range(cu[b], cu[b + 1], BQ)]
        res = tuple(torch.tensor([p[i] for p in pairs], dtype=torch.int32).to(device, non_blocking=True)
                    for i in (0, 1))
    meta.cache = (meta.cache or {}) | {"inv_tiles": res}
    return res


def old_step(self, tb, sb, meta):
    """PrefillGraphs._step before the fix: the layers as the last engine left them."""
    hidden = self.model(self.d64[0, :tb], self.d64[1, :tb], meta, self.kv)
    logits = self.model.compute_logits(hidden.index_select(0, self.dsamp[:sb]))
    return logits, logits.argmax(dim=-1)


def drive(engine, reqs) -> tuple[dict[str, list[int]], int]:
    """Every request to its end -> (tokens by request id, requests that ended in an error)."""
    for r in reqs:
        engine.add_request(r)
    out, errors = {r.request_id: [] for r in reqs}, 0
    while engine.has_work():
        for ev in engine.step():
            errors += ev.finish_reason == "error"
            if ev.token_id is not None:
                out[ev.request_id].append(ev.token_id)
    return out, errors


def old_path(tmp: Path, device: str = "cuda") -> str:
    import torch

    import orcd.models.layers.attention_invariant as inv
    from orcd.engine.io import EngineRequest
    from orcd.engine.llm_engine import LLMEngine
    from orcd.engine.sampling_params import SamplingParams
    from orcd.runner.prefill_graphs import PrefillGraphs
    from tests.engine.test_engine_gpu import workload

    inv._tiles, PrefillGraphs._step = old_tiles, old_step
    loaded = model(tmp, device)
    kw = dict(num_kv_blocks=256, max_num_batched_tokens=256, enable_prefix_caching=False)
    reqs = [r for r in workload(16) if r.sampling.seed is None]
    want, _ = drive(LLMEngine(loaded, **kw), reqs)
    seeded = EngineRequest("s", list(range(3, 40)), SamplingParams(max_tokens=4, seed=1, ignore_eos=True))
    drive(LLMEngine(loaded, batch_invariant="all", **kw), [seeded])
    after = LLMEngine(loaded, **kw)
    got, errors = drive(after, reqs)
    if device == "cuda":
        torch.cuda.synchronize()
    diff = sum(got[k] != want[k] for k in want)
    warm, graphs = after.prefill_graph_warmup or {}, after.runner.prefill_graphs
    return (f"prefill capture {'failed' if warm.get('failed') else 'ok'}, "
            f"{graphs.replays if graphs else 0} replays, {errors} errors, {diff}/{len(want)} differ")


def model(tmp: Path, device: str):
    """tests/engine/test_engine_gpu.py's model."""
    from gguf import GGMLQuantizationType as Q

    from orcd.gguf.synth import write_model_gguf
    from orcd.loading.loader import load_model
    from tests.engine.test_engine_gpu import VOCAB

    path = write_model_gguf(tmp / "m.gguf", "qwen2", vocab_size=VOCAB, hidden=256, n_layers=2, ffn=512,
                            n_heads=4, n_kv_heads=2, context_length=1024, tied=False,
                            qtypes={"default": Q.Q8_0, "attn_q": Q.Q5_0, "ffn_down": Q.Q4_K}, seed=2)
    return load_model(path, device)


def child(args: list[str], timeout: float = 300) -> tuple[str, float]:
    """(last non-empty output line, or the exit status and the last error line; seconds)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s", time.perf_counter() - t0
    lines = [x for x in (p.stdout + p.stderr).splitlines() if x.strip()]
    if p.returncode == 0:
        return (lines[-1] if lines else "ok"), time.perf_counter() - t0
    err = next((x for x in reversed(lines) if "rror" in x or "FAILED" in x), lines[-1] if lines else "")
    return f"rc {p.returncode}: {err[:160]}", time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, help="also write shared_model_check.json / .md there")
    ap.add_argument("--child", choices=("probe", "old"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "probe":
        print(probe())
        return
    if args.child == "old":
        import tempfile

        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: tests/ is imported

        with tempfile.TemporaryDirectory() as tmp:
            print(old_path(Path(tmp)))
        return
    rows = [("probe: pageable non-blocking H2D copy in a capture", *child([__file__, "--child", "probe"])),
            ("old path: prefill graphs after an 'all' engine", *child([__file__, "--child", "old"]))]
    rows += [(name, *child([*PYTEST, *t], timeout=400)) for name, t in TESTS]
    table = ["| check | result | seconds |", "|---|---|---|"]
    table += [f"| {name} | {res} | {secs:.1f} |" for name, res, secs in rows]
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        (args.out_dir / "shared_model_check.json").write_text(json.dumps(
            [{"check": n, "result": r, "seconds": round(s, 1)} for n, r, s in rows], indent=1))
        (args.out_dir / "shared_model_check.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
