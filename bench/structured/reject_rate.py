"""How often a constrained row's unmasked greedy token breaks its grammar (issue 18): a real model against
random weights of the same shapes.

mask_cost.py measures the mask's share of the step on random-weight files, whose greedy tokens the grammar
rejects on most rows; each rejected row costs a full mask (check-first path, GrammarBackend.check_first).
This runs the same two schemas (mask_cost.SCHEMAS: "plain", and "bounded" with maxLength strings) through
LLMEngine with text prompts that lead into that JSON, greedy, on any device, and counts per decode step the
constrained rows drawn again from their masks (GuidedStep.rejected) and the rows masked before the draw.
The share of the mask on the H100 then follows from its per-row fill time there (not measured here).

    python bench/structured/reject_rate.py --model real.gguf --model random.gguf [--streams 8] [--steps 48]
        [--device cpu] [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mask_cost import SCHEMAS  # noqa: E402

NAMES = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Margaret", "Dennis",
         "Radia", "John", "Leslie", "Shafi", "Tim", "Yann"]


def prompts(tok, n: int) -> list[list[int]]:
    """n plain-text prompts (base models have no chat template) that lead into the schema's JSON, each
    naming other people."""
    out = []
    for i in range(n):
        who = ", ".join(NAMES[(i + j) % len(NAMES)] for j in range(3))
        text = (f"The team, starting with {who}, as JSON: an object whose key \"people\" holds a list of "
                "people, each with name, age, email, role (admin, user or guest) and tags.\n")
        out.append(tok.encode(text))
    return out


class Counter:
    """Counts rejected rows (GuidedStep.rejected) and rows masked before the draw (GuidedStep.first)."""

    def __init__(self):
        from orcd.structured import guide

        self.rejected = self.first = self.rows = 0
        inner = guide.GuidedStep.rejected

        def counted(step, tokens):
            out = inner(step, tokens)
            self.rejected += len(out)
            self.first += len(step.first)
            self.rows += sum(m is not None for m in step.matchers)
            return out

        guide.GuidedStep.rejected = counted


def run_model(path: str, device: str, streams: int, steps: int, counter: Counter) -> list[dict]:
    from orcd.engine.io import EngineRequest
    from orcd.engine.llm_engine import LLMEngine
    from orcd.engine.sampling_params import SamplingParams
    from orcd.loading.loader import load_model
    from orcd.structured.grammars import json_schema_grammar

    loaded = load_model(path, device)
    ps = prompts(loaded.tokenizer, streams)
    blocks = streams * (-(-(max(map(len, ps)) + steps) // 16) + 1) + 16
    eng = LLMEngine(loaded, num_kv_blocks=blocks, max_num_seqs=max(streams, 8), enable_prefix_caching=False)
    eng.grammars().check_first, eng.grammars().mask_ahead = True, False  # every row checked first
    rows = []
    for schema in ("plain", "bounded"):
        grammar = json_schema_grammar(SCHEMAS[schema], "schema")
        sp = SamplingParams(max_tokens=steps, temperature=0.0, grammar=grammar)
        for i, p in enumerate(ps):
            eng.add_request(EngineRequest(f"{schema}-{i}", p, sp))
        counter.rejected = counter.first = counter.rows = 0
        texts: dict[str, list[int]] = {}
        t0 = time.perf_counter()
        while eng.has_work():
            for ev in eng.step():
                if ev.error:
                    raise RuntimeError(ev.error)
                if ev.token_id is not None:
                    texts.setdefault(ev.request_id, []).append(ev.token_id)
        row = {"model": Path(path).name, "schema": schema, "streams": streams, "steps": steps,
               "constrained_rows": counter.rows, "rejected": counter.rejected,
               "reject_share": counter.rejected / max(1, counter.rows), "wall_s": time.perf_counter() - t0,
               "sample": loaded.tokenizer.decode(texts[f"{schema}-0"])[:160]}
        print(f"{row['model']:40s} {schema:8s} rows {row['constrained_rows']:5d}  rejected "
              f"{row['rejected']:5d} ({100 * row['reject_share']:.1f} %)  {row['sample']!r}", flush=True)
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out")
    a = ap.parse_args()
    counter = Counter()
    rows = [r for m in a.model for r in run_model(m, a.device, a.streams, a.steps, counter)]
    if a.out:
        Path(a.out).write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "rows": rows},
                                          indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
