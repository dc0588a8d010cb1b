"""What the structured-output mask costs in the engine's decode step (LLMEngine.step(): scheduler, CUDA-graph
decode, sampler, matchers), at C streams each: (a) free, (b) all C held to a JSON schema, (c) half of them.

Every request is greedy and gets max_tokens = --steps; free ones ignore EOS, constrained ones follow a schema
that cannot end sooner (an array of at least 400 objects), so every stream decodes to the end. Decode
ms/step counts from the step after every stream has its first token. The mask's share of the step is
(ms/step(b) - ms/step(a)) / ms/step(b). (b) and (c) run once per --paths entry (GrammarBackend.check_first):
- mask: every constrained row's bitmask before sampling (the path before check first);
- check: rows drawn unmasked, masked only where the grammar rejects the token (orcd/structured/guide.py);
- auto: the per-row policy (GrammarBackend.mask_ahead, the default): rows whose last mask was cheap, and
  slow rows rejected last step while the forward runs, are masked before the draw; the rest checked.
Split of the mask's work, per decode step:
- fill: CPU wall time of GrammarBackend.fill_row (pending tokens, then one row's bitmask), on CUDA partly
  while the forward pass runs; masks: rows filled per step;
- check: CPU wall time of Matcher.quick_check (llguidance's check of one sampled token); rejected: rows
  drawn again from their masked logits, per step;
- consume: CPU wall time of Matcher.consume calls (the engine resolves tokens between steps; since the
  grammar rows' overlap, while the next step's forward runs);
- apply: device time of apply_mask (bitmask upload, unpack, -inf), CUDA events around it.
Each constrained output is checked against its grammar (llguidance validate_tokens); with --check-free,
the free rows of (c) must equal the same prompts' rows of (a), and (a) run again must equal itself (its
prompts then come from the prefix cache: --no-prefix-cache prefills every round anew). Runs on the CPU
too (--device cpu).

    python bench/structured/mask_cost.py --model F.gguf --tag after [--concurrency 1,8,32,64] [--steps 64]
        [--paths mask,check,auto] [--slices orcd|default]
    python bench/structured/mask_cost.py --report before.json after.json --out bench/results
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
from mask_report import RESULT, report

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string"}, "role": {"enum": ["admin", "user", "guest"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 5}},
    "required": ["name", "age", "email", "role", "tags"], "additionalProperties": False}
SCHEMA = {"type": "object", "properties": {"people": {"type": "array", "items": PERSON, "minItems": 400}},
          "required": ["people"], "additionalProperties": False}
# the same without length or range bounds (OpenAI's strict mode takes none): llguidance's slicer then
# masks string contents wholesale; inside a string with maxLength each token walks the whole vocabulary
PLAIN_PERSON = {**PERSON, "properties": {
    **PERSON["properties"], "name": {"type": "string"}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}}}}
SCHEMAS = {"bounded": SCHEMA, "plain": {**SCHEMA, "properties": {"people": {
    "type": "array", "items": PLAIN_PERSON, "minItems": 400}}}}


class Probe:
    """Wraps the mask's entry points to time them: CPU wall of fill_row, quick_check and consume, device
    time of apply_mask, and counts masked and rejected rows."""

    def __init__(self, engine):
        from orcd.runner import sampler
        from orcd.structured import backend as be
        from orcd.structured import guide

        self.events: list = []
        self.reset()
        grammars = engine.grammars()
        fill_row, check, consume = grammars.fill_row, be.Matcher.quick_check, be.Matcher.consume
        apply, rejected = sampler.apply_mask, guide.GuidedStep.rejected

        def timed_fill_row(*a, **kw):
            t0 = time.perf_counter()
            fill_row(*a, **kw)
            self.fills.append(time.perf_counter() - t0)

        def timed(fn, total: str):
            def wrapped(*a):
                t0 = time.perf_counter()
                out = fn(*a)
                self.sums[total] += time.perf_counter() - t0
                return out
            return wrapped

        def counted_rejected(step, tokens):
            out = rejected(step, tokens)
            self.sums["rejected"] += len(out)
            return out

        def timed_apply(logits, rows, bitmask):
            if not logits.is_cuda:
                return apply(logits, rows, bitmask)
            ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev[0].record()
            out = apply(logits, rows, bitmask)
            ev[1].record()
            self.events.append(ev)
            return out

        grammars.fill_row, sampler.apply_mask = timed_fill_row, timed_apply
        be.Matcher.quick_check, be.Matcher.consume = timed(check, "check"), timed(consume, "consume")
        guide.GuidedStep.rejected = counted_rejected

    def reset(self) -> None:
        self.fills: list[float] = []
        self.sums = {"check": 0.0, "consume": 0.0, "rejected": 0}
        self.events = []

    def mark(self) -> None:
        """Start of the decode window: forget what came before (the prefill step's first masks)."""
        self.first_fill_ms = 1e3 * sum(self.fills)
        self.reset()

    def totals(self) -> dict:
        """Per-window totals: ms of CPU work (fill, check, consume), device ms (apply), row counts."""
        if self.events:
            torch.cuda.synchronize()
        return {"fill_ms": 1e3 * sum(self.fills), "check_ms": 1e3 * self.sums["check"],
                "consume_ms": 1e3 * self.sums["consume"], "masks": len(self.fills),
                "rejected": self.sums["rejected"],
                "apply_gpu_ms": sum(a.elapsed_time(b) for a, b in self.events)}


def one_round(engine, probe: Probe, c: int, n_constrained: int, steps: int, prompt_len: int,
              seed: int, schema: str, path: str = "check") -> dict:
    from orcd.engine.io import EngineRequest
    from orcd.engine.sampling_params import SamplingParams
    from orcd.structured.grammars import json_schema_grammar

    grammar = json_schema_grammar(SCHEMAS[schema], "schema")
    backend = engine.grammars()
    backend.check_first = path in ("check", "auto")
    backend.mask_ahead = path == "auto"
    rng = random.Random(seed)
    free = SamplingParams(max_tokens=steps, temperature=0.0, ignore_eos=True)
    held = SamplingParams(max_tokens=steps, temperature=0.0, grammar=grammar)
    for i in range(c):  # the same prompts for every mode at this C; constrained rows first
        prompt = [rng.randrange(engine.tokenizer.vocab_size) for _ in range(prompt_len)]
        engine.add_request(EngineRequest(f"s{seed}-{i}", prompt, held if i < n_constrained else free))
    out: dict[str, list[int]] = {}
    t_dec, n_dec, n_steps = None, 0, 0
    probe.reset()
    while engine.has_work():
        events = engine.step()
        n_steps += int(t_dec is not None)
        for ev in events:
            if ev.error:
                raise RuntimeError(ev.error)
            if ev.token_id is not None:
                n_dec += int(t_dec is not None)
                out.setdefault(ev.request_id, []).append(ev.token_id)
        if t_dec is None and len(out) == c:
            torch.cuda.synchronize() if torch.cuda.is_available() else None
            t_dec = time.perf_counter()
            probe.mark()
    t1 = time.perf_counter()
    per = {k: v / max(1, n_steps) for k, v in probe.totals().items()}
    valid = all(_valid(engine, grammar, out[f"s{seed}-{i}"]) for i in range(n_constrained))
    row = {"schema": schema, "path": path if n_constrained else "-", "streams": c,
           "constrained": n_constrained, "decode_tok_s": n_dec / (t1 - t_dec),
           "ms_per_step": 1e3 * (t1 - t_dec) / max(1, n_steps), "steps": n_steps,
           "first_fill_ms": probe.first_fill_ms, "outputs_valid": valid}
    row |= {f"{k}_per_step": v for k, v in per.items()}
    return row | {"_tokens": [out[f"s{seed}-{i}"] for i in range(c)]}


def _valid(engine, grammar: str, tokens: list[int]) -> bool:
    """The tokens are a prefix of a text the grammar accepts (every one allowed in turn)."""
    import llguidance

    m = llguidance.LLMatcher(engine.grammars().lltok, grammar, log_level=0)
    return m.validate_tokens(tokens) == len(tokens)


def run(args) -> dict:
    from orcd.engine.llm_engine import LLMEngine
    from orcd.loading.loader import load_model

    loaded = load_model(args.model, args.device)
    cs = [int(c) for c in args.concurrency.split(",")]
    blocks = max(cs) * (-(-(args.prompt_len + args.steps) // 16) + 1) + 16
    engine = LLMEngine(loaded, num_kv_blocks=blocks, max_num_seqs=max(64, max(cs)), enforce_eager=args.eager,
                       enable_prefix_caching=not args.no_prefix_cache)
    probe = Probe(engine)
    if args.slices == "default":  # llguidance's own tokenizer slices, not orcd's MASK_SLICES (before use)
        engine.grammars().slices = None
    engine.grammars().lltok  # noqa: B018 - the llguidance tokenizer (~1 s), before any timing
    dev = torch.cuda.get_device_name() if loaded.device.type == "cuda" else "cpu"
    res = {"device": dev, "model": args.model, "tag": args.tag, "steps": args.steps,
           "prompt_len": args.prompt_len, "prefix_cache": not args.no_prefix_cache,
           "vocab": engine.tokenizer.vocab_size, "slices": args.slices,
           "graphs": engine.runner.graph is not None, "command": " ".join(["python", *sys.argv]),
           "rounds": []}
    paths = args.paths.split(",")
    for c in cs:  # warm-up: each batch shape and every path once (Triton compiles, first masks)
        for path in paths:
            one_round(engine, probe, c, c, 4, args.prompt_len, 1000 + c, "plain", path)
        one_round(engine, probe, c, 0, 4, args.prompt_len, 1000 + c, "plain")
    for schema, c in [(s, c) for s in args.schemas.split(",") for c in cs]:
        ref, by_path = None, {}
        for n, path in [(0, "-")] + [(n, p) for n in sorted({c // 2, c} - {0}) for p in paths]:
            r = one_round(engine, probe, c, n, args.steps, args.prompt_len, c, schema, path)
            toks = r.pop("_tokens")
            if n == 0:
                ref = toks
                if args.check_free:  # the same free batch again: its prompts now hit the prefix cache
                    again = one_round(engine, probe, c, 0, args.steps, args.prompt_len, c, schema)
                    r["free_rows_unchanged"] = again.pop("_tokens") == ref
            elif args.check_free and 0 < n < c:
                r["free_rows_unchanged"] = toks[n:] == ref[n:]
            if n:  # greedy: every path gives the same tokens
                r["same_tokens_as_first_path"] = by_path.setdefault(n, toks) == toks
            res["rounds"].append(r)
            print(f"{args.tag} {schema} {path:5s} C={c:3d} constrained={n:3d}: {_summary(r)}", flush=True)
    return res


def _summary(r: dict) -> str:
    free = f"  free rows unchanged {r['free_rows_unchanged']}" if "free_rows_unchanged" in r else ""
    return (f"{r['ms_per_step']:.3f} ms/step {r['decode_tok_s']:9,.0f} tok/s  fill "
            f"{r['fill_ms_per_step']:.3f} ({r['masks_per_step']:.1f} rows)  check "
            f"{r['check_ms_per_step']:.3f} (rejected "
            f"{r['rejected_per_step']:.1f})  consume {r['consume_ms_per_step']:.3f}  apply "
            f"{r['apply_gpu_ms_per_step']:.3f} ms  first fill {r['first_fill_ms']:.1f} ms  valid "
            f"{r['outputs_valid']}{free}  same tokens {r.get('same_tokens_as_first_path', '-')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--tag", default="orcd")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--schemas", default="plain,bounded", help="of " + ",".join(SCHEMAS))
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--eager", action="store_true", help="no CUDA graphs")
    ap.add_argument("--check-free", action="store_true",
                    help="(c)'s free rows equal (a)'s; (a) run twice equals itself")
    ap.add_argument("--no-prefix-cache", action="store_true", help="every round prefills its prompts anew")
    ap.add_argument("--paths", default="mask,check,auto",
                    help="constrained paths to time: mask, check, auto")
    ap.add_argument("--slices", default="orcd", choices=["orcd", "default"],
                    help="llguidance tokenizer slices: orcd's MASK_SLICES or llguidance's defaults")
    ap.add_argument("--out", default=".")
    ap.add_argument("--report", nargs="+", help="JSON files of earlier runs -> OUT/mask_cost.md/.json/.png")
    args = ap.parse_args()
    if args.report:
        report(args.report, Path(args.out))
        return 0
    res = run(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{RESULT}_{args.tag}.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
