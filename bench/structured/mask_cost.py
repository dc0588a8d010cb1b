"""What the structured-output mask costs in the engine's decode step (LLMEngine.step(): scheduler, CUDA-graph
decode, sampler, matchers), at C streams each: (a) free, (b) all C held to a JSON schema, (c) half of them.

Every request is greedy and gets max_tokens = --steps; free ones ignore EOS, constrained ones follow a schema
that cannot end sooner (an array of at least 400 objects), so every stream decodes to the end. Decode
ms/step counts from the step after every stream has its first token. The mask's share of the step is
(ms/step(b) - ms/step(a)) / ms/step(b). Split of the mask's work, per decode step:
- fill: CPU wall time of GrammarBackend.fill (the matchers' pending tokens, then every row's bitmask),
  issued after the graph replay is launched, so it overlaps the forward pass;
- consume: CPU wall time of Matcher.consume calls (the engine appends tokens between steps: not overlapped);
- apply: device time of apply_mask (bitmask upload, unpack, -inf), CUDA events around it.
Each constrained output is checked against its grammar (llguidance validate_tokens); with --check-free,
the free rows of (c) must equal the same prompts' rows of (a).

    python bench/structured/mask_cost.py --model F.gguf --tag after [--concurrency 1,8,32,64] [--steps 64]
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
RESULT = "mask_cost"


class Probe:
    """Wraps the mask's entry points to time them: CPU wall of fill and consume, device time of apply."""

    def __init__(self, engine):
        from orcd.runner import sampler
        from orcd.structured import backend as be

        self.fill_s, self.consume_s, self.events, self.fills = 0.0, 0.0, [], []
        grammars = engine.grammars()
        fill, consume, apply = grammars.fill, be.Matcher.consume, sampler.apply_mask

        def timed_fill(*a, **kw):
            t0 = time.perf_counter()
            out = fill(*a, **kw)
            self.fills.append(time.perf_counter() - t0)
            return out

        def timed_consume(m, t):
            t0 = time.perf_counter()
            consume(m, t)
            self.consume_s += time.perf_counter() - t0

        def timed_apply(logits, rows, bitmask):
            if not logits.is_cuda:
                return apply(logits, rows, bitmask)
            ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev[0].record()
            out = apply(logits, rows, bitmask)
            ev[1].record()
            self.events.append(ev)
            return out

        grammars.fill, be.Matcher.consume, sampler.apply_mask = timed_fill, timed_consume, timed_apply

    def mark(self) -> None:
        """Start of the decode window: forget what came before (the prefill step's first masks)."""
        self.first_fill_ms = 1e3 * max(self.fills, default=0.0)
        self.fills, self.consume_s, self.events = [], 0.0, []

    def totals_ms(self) -> dict:
        if self.events:
            torch.cuda.synchronize()
        return {"fill_ms": 1e3 * sum(self.fills), "consume_ms": 1e3 * self.consume_s,
                "apply_gpu_ms": sum(a.elapsed_time(b) for a, b in self.events)}


def one_round(engine, probe: Probe, c: int, n_constrained: int, steps: int, prompt_len: int,
              seed: int, schema: str) -> dict:
    from orcd.engine.io import EngineRequest
    from orcd.engine.sampling_params import SamplingParams
    from orcd.structured.grammars import json_schema_grammar

    grammar = json_schema_grammar(SCHEMAS[schema], "schema")
    rng = random.Random(seed)
    free = SamplingParams(max_tokens=steps, temperature=0.0, ignore_eos=True)
    held = SamplingParams(max_tokens=steps, temperature=0.0, grammar=grammar)
    for i in range(c):  # the same prompts for every mode at this C; constrained rows first
        prompt = [rng.randrange(engine.tokenizer.vocab_size) for _ in range(prompt_len)]
        engine.add_request(EngineRequest(f"s{seed}-{i}", prompt, held if i < n_constrained else free))
    out: dict[str, list[int]] = {}
    t_dec, n_dec, n_steps = None, 0, 0
    probe.fills, probe.consume_s, probe.events = [], 0.0, []
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
    per = {k: v / max(1, n_steps) for k, v in probe.totals_ms().items()}
    valid = all(_valid(engine, grammar, out[f"s{seed}-{i}"]) for i in range(n_constrained))
    row = {"schema": schema, "streams": c, "constrained": n_constrained, "decode_tok_s": n_dec / (t1 - t_dec),
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
    engine = LLMEngine(loaded, num_kv_blocks=blocks, max_num_seqs=max(64, max(cs)), enforce_eager=args.eager)
    probe = Probe(engine)
    engine.grammars().lltok  # noqa: B018 - the llguidance tokenizer (~1 s), before any timing
    dev = torch.cuda.get_device_name() if loaded.device.type == "cuda" else "cpu"
    res = {"device": dev, "model": args.model, "tag": args.tag, "steps": args.steps,
           "prompt_len": args.prompt_len,
           "vocab": engine.tokenizer.vocab_size, "graphs": engine.runner.graph is not None,
           "command": " ".join(["python", *sys.argv]), "rounds": []}
    for c in cs:  # warm-up: each batch shape and both paths once (Triton compiles, first masks)
        one_round(engine, probe, c, c, 4, args.prompt_len, 1000 + c, "plain")
        one_round(engine, probe, c, 0, 4, args.prompt_len, 1000 + c, "plain")
    for schema, c in [(s, c) for s in args.schemas.split(",") for c in cs]:
        ref = None
        for n in sorted({0, c // 2, c}):
            r = one_round(engine, probe, c, n, args.steps, args.prompt_len, c, schema)
            toks = r.pop("_tokens")
            if n == 0:
                ref = toks
            elif args.check_free and 0 < n < c:
                r["free_rows_unchanged"] = toks[n:] == ref[n:]
            res["rounds"].append(r)
            print(f"{args.tag} {schema} C={c:3d} constrained={n:3d}: {r['ms_per_step']:.3f} ms/step "
                  f"{r['decode_tok_s']:9,.0f} tok/s  fill {r['fill_ms_per_step']:.3f}  consume "
                  f"{r['consume_ms_per_step']:.3f}  apply {r['apply_gpu_ms_per_step']:.3f} ms  "
                  f"first fill {r['first_fill_ms']:.1f} ms  valid {r['outputs_valid']}", flush=True)
    return res


def shares(res: dict) -> list[dict]:
    """Per (C, constrained > 0): the mask's share of the step against the free step at the same C."""
    free = {(_schema(r), r["streams"]): r["ms_per_step"] for r in res["rounds"] if r["constrained"] == 0}
    return [r | {"share": (r["ms_per_step"] - free[_schema(r), r["streams"]]) / r["ms_per_step"]}
            for r in res["rounds"] if r["constrained"] > 0]


def _schema(row: dict) -> str:
    return row.get("schema", "bounded")  # runs before --schemas existed used SCHEMA


def report(paths: list[str], out: Path) -> None:
    results = [json.loads(Path(p).read_text()) for p in paths]
    first = results[0]
    lines = [f"# Structured-output mask cost in the decode step ({first['device']})", "",
             f"Model {Path(first['model']).name}, vocabulary {first['vocab']:,} "
             f"tokens, {first['steps']} greedy tokens per stream, prompts of {first['prompt_len']} tokens, "
             f"CUDA graphs {'on' if first['graphs'] else 'off'}. Schema: an object holding an array of "
             ">= 400 objects of 5 fields (string, integer, email string, enum, array of strings); bounded: "
             "maxLength 40 / 12 on the strings, an age range, maxItems 5; plain: no such bounds."
             " share = (ms/step - free ms/step) / ms/step; fill, consume (CPU wall) and apply (device) are "
             "per decode step. Runs (code = the orcd commit's tag):", "",
             *[f"- {r['tag']}: `{r['command']}`" for r in results], "",
             "| code | schema | streams | constrained | ms/step | tok/s | share | fill ms | consume ms | "
             "apply ms | first fill ms | valid |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        free = [r for r in res["rounds"] if r["constrained"] == 0]
        for r in sorted(free + shares(res), key=lambda r: (_schema(r), r["streams"], r["constrained"])):
            share = f"{100 * r['share']:.1f} %" if "share" in r else "-"
            lines.append(f"| {res['tag']} | {_schema(r)} | {r['streams']} | {r['constrained']} | "
                         f"{r['ms_per_step']:.3f} | {r['decode_tok_s']:,.0f} | {share} | "
                         f"{r['fill_ms_per_step']:.3f} | {r['consume_ms_per_step']:.3f} | "
                         f"{r['apply_gpu_ms_per_step']:.3f} | {r['first_fill_ms']:.1f} | "
                         f"{r['outputs_valid']} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{RESULT}.md").write_text("\n".join(lines) + "\n")
    (out / f"{RESULT}.json").write_text(json.dumps(results, indent=1))
    _plot(results, out / f"{RESULT}.png")


def _plot(results: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for res in results:
        lines: dict[tuple[str, bool], list[dict]] = {}
        for r in shares(res):
            lines.setdefault((_schema(r), r["constrained"] == r["streams"]), []).append(r)
        for (schema, every), rows in sorted(lines.items()):
            ax.plot([r["streams"] for r in rows], [100 * r["share"] for r in rows], "-" if every else "--",
                    marker="o", label=f"{res['tag']}, {schema}: {'all' if every else 'half'} constrained")
    ax.axhline(10, color="tab:red", linestyle=":", label="10 % limit")
    ax.set(xlabel="streams", ylabel="mask share of step time (%)", xscale="log", title=results[0]["device"])
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


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
    ap.add_argument("--check-free", action="store_true", help="(c)'s free rows equal (a)'s")
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
