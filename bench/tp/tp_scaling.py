"""Tensor-parallel throughput: a Qwen2.5-7B-shaped Q4_K_M file at 1 and 2 GPUs (NCCL).

Meant for a host with >= 2 GPUs:
    python bench/tp/tp_scaling.py                 # synthesizes the 7B-shaped file if --file is absent
    python bench/tp/tp_scaling.py --ranks 1,2,4 --streams 1,8,32,64 --file /path/qwen2.5-7b-q4_k_m.gguf
Per rank count N it spawns N ranks (orcd.distributed: rank r on cuda:r, NVLink multicast off) and, on
rank 0, measures through the leader engine (the same path as `orcd generate --tensor-parallel N`):
- prefill tok/s: one request of --prompt-len tokens, max_tokens=1 (one step, K/V of every token);
- decode tok/s, for each count B in --streams: B requests decoding --decode-tokens tokens each
  (ignore_eos), generated tokens per second after every stream has its first token.
Writes OUT/tp.json and OUT/tp.md (one row per rank count and stream count). --q6k-layout gguf: the
ranks keep the file's Q6_K blocks (default auto: the slices the fused step reads go split, issue 21).
On the CPU (gloo; tests/test_bench_scripts.py runs it at 2 ranks):
    python bench/tp/tp_scaling.py --device cpu --file TINY.gguf --prompt-len 16 --decode-tokens 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DEFAULT_FILE = "/tmp/orcd-qwen2.5-7b-q4_k_m.gguf"


def _requests(engine, prompts: list[list[int]], max_tokens: int) -> tuple[float, float]:
    """Run prompts to completion -> (seconds to the last first token, seconds after it to the end)."""
    from orcd.engine.io import EngineRequest
    from orcd.engine.sampling_params import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    for i, ids in enumerate(prompts):
        engine.add_request(EngineRequest(f"b{i}", ids, params))
    t0, firsts = time.perf_counter(), set()
    t_first = None
    while engine.has_work():
        for ev in engine.step():
            if ev.error:
                raise RuntimeError(ev.error)
            firsts.add(ev.request_id)
        if t_first is None and len(firsts) == len(prompts):
            t_first = time.perf_counter()
    return t_first - t0, time.perf_counter() - t_first


def bench_rank(ctx, path: str, args: dict, out_json: str) -> int:
    """Every rank: load the shard; rank 0 measures prefill and decode through the leader engine."""
    from orcd.distributed.driver import load_sharded, run_rank

    if args["mode"] == "tp-symm":  # tp-graphs with the one-shot symmetric-memory all-reduce
        ctx.all_reduce = "symm"
    t0 = time.perf_counter()
    loaded = load_sharded(path, ctx, q6k_layout=args["q6k_layout"])
    load_s = time.perf_counter() - t0

    def lead(make_engine) -> list[dict]:
        p, d, streams, mode = args["prompt_len"], args["decode_tokens"], args["streams"], args["mode"]
        kw = dict(kv_fraction=0.5, max_num_seqs=max(streams), enable_prefix_caching=False,  # no cache hits
                  max_num_batched_tokens=max(p, 2048), batch_invariant="off")
        if mode == "engine":  # the single-GPU engine as it serves: fused decode graphs, prefill graphs
            from orcd.engine.llm_engine import LLMEngine

            engine = LLMEngine(loaded, **kw)
        else:
            engine = make_engine(loaded, enforce_eager=mode == "tp-eager", **kw)
        vocab = loaded.cfg.vocab_size
        prompt = [(7 + 31 * i) % vocab for i in range(max(p, 16 + max(streams)))]
        _requests(engine, [prompt[:64]], 8)  # warm-up: kernels compiled / autotuned
        _requests(engine, [prompt[j : j + 16] for j in range(max(streams))], 4)  # ... at the widest batch
        prefill = [_requests(engine, [prompt[:p]], 1)[0] for _ in range(3)]
        common = {"ranks": ctx.world, "mode": mode, "q6k_layout": args["q6k_layout"],
                  "device": str(ctx.device), "load_s": load_s,
                  "weights_MiB_rank0": loaded.weights_bytes / 2**20,
                  "prefill_tokens": p, "prefill_tok_s": p / sorted(prefill)[1], "decode_tokens": d}
        if ctx.device.type == "cuda":
            import torch

            common["gpu"] = torch.cuda.get_device_name(ctx.device)
        rows = []
        for b in streams:
            _, decode_s = _requests(engine, [prompt[j : j + 16] for j in range(b)], d)
            rows.append({**common, "decode_streams": b, "decode_tok_s": b * (d - 1) / decode_s})
        rows[-1]["executors"] = dict(engine.runner.steps_by_executor)
        rows[-1]["overlapped_steps"] = engine.overlapped_steps  # launched before the step before was read
        if ctx.device.type == "cuda":
            rows[-1]["peak_MiB_rank0"] = torch.cuda.max_memory_allocated(ctx.device) / 2**20
        return rows

    res = run_rank(ctx, loaded, lead)
    if ctx.rank == 0:
        Path(out_json).write_text(json.dumps(res))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=DEFAULT_FILE, help="GGUF (written with `orcd synth` when absent)")
    ap.add_argument("--like", default="qwen2.5-7b", help="synth preset when --file is absent")
    ap.add_argument("--ranks", default="1,2", help="comma-separated rank counts")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--prompt-len", type=int, default=2048)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--streams", default="1", help="comma-separated counts of concurrent decode streams")
    ap.add_argument("--modes", default="tp-graphs",
                    help="comma-separated: tp-graphs (decode graphs of the fused TP step, collectives "
                         "inside; at 1 rank the engine's fused step), tp-symm (tp-graphs with the "
                         "symmetric-memory one-shot all-reduce), tp-eager, engine (1 GPU only: the "
                         "plain engine, fused decode graphs and prefill graphs)")
    ap.add_argument("--q6k-layout", default="auto", choices=["auto", "gguf"],
                    help="load_sharded's: auto splits the Q6_K slices the fused step reads (issue 21)")
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()

    from orcd.distributed.runtime import launch, resolve_tp_device

    path = Path(a.file)
    if not path.exists():
        from orcd.cli.synth import synth_like

        print(f"writing {path} (synth --like {a.like}) ...", file=sys.stderr, flush=True)
        synth_like(str(path), a.like)
    streams = [int(x) for x in a.streams.split(",")]
    rows: list[dict] = []
    runs = [(n, m) for m in a.modes.split(",") for n in (int(x) for x in a.ranks.split(","))
            if m != "engine" or n == 1]
    for n, mode in runs:
        knobs = {"prompt_len": a.prompt_len, "decode_tokens": a.decode_tokens, "streams": streams,
                 "mode": mode, "q6k_layout": a.q6k_layout}
        device = resolve_tp_device(a.device, n)
        tmp = Path(a.out) / f".tp_{n}.json"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if launch(n, device, bench_rank, (str(path), knobs, str(tmp))) != 0:
            print(f"{n} ranks ({mode}) failed", file=sys.stderr)
            continue
        wall = time.perf_counter() - t0
        rows += [{"file": path.name, "run_s": wall, **r} for r in json.loads(tmp.read_text())]
        tmp.unlink()
        print(json.dumps(rows[-len(streams):]), flush=True)
        _write(Path(a.out), rows, f"{path.name}, prompt {a.prompt_len}, streams x {a.decode_tokens} tokens")
    return 0


def _write(out: Path, rows: list[dict], title: str) -> None:
    """OUT/tp.json and OUT/tp.md, rewritten after every run (a run cut short keeps the earlier ones)."""
    (out / "tp.json").write_text(json.dumps(rows, indent=1))
    lines = ["| ranks | device | streams | decode tok/s | prefill tok/s | load s | MiB (rank 0) | mode "
             "| Q6_K |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['ranks']} | {r.get('gpu', r['device'])} | {r['decode_streams']} | "
              f"{r['decode_tok_s']:.1f} | {r['prefill_tok_s']:.0f} | {r['load_s']:.1f} | "
              f"{r['weights_MiB_rank0']:.0f} | {r['mode']} | {r['q6k_layout']} |" for r in rows]
    text = title + "\n\n" + "\n".join(lines) + "\n"
    (out / "tp.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    sys.exit(main())
