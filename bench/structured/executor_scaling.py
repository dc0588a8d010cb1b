"""Whether llguidance's parallel executor (LLExecutor) scales when its tokenizer calls back into Python.

64 rows walk valid JSON text (fill_scaling.answer, the plain schema) on llama.cpp's qwen2 vocabulary. Each
step every row's mask is computed: one matcher after another on this thread ("serial"), or in one
LLExecutor(n) call. Two llguidance tokenizers: orcd's (`callback`: GrammarBackend.lltok, which encodes a
grammar's forced bytes through orcd's Python tokenizer, memoized), and `native`: llguidance's own from the
`tokenizers` JSON of orcd's BPE model, its control tokens added as special tokens (no Python during a mask;
an experiment, not a replacement: `tokenizers` matches added tokens inside text, so forced text that spells
a control token is tokenized otherwise than orcd does). Prints the mean and median ms a step of the masks
alone, the rows that fell into an error state (the walk's tokens are orcd's), and the steps whose masks
differ between the two tokenizers. --grammar letters: the regex `[a-z ]{0,4000}` over lowercase words
instead, a grammar that forces no bytes (no callback with either tokenizer; each mask walks the whole
vocabulary). Not a test; CPU.

    python bench/structured/executor_scaling.py [--rows 64] [--tokens 64] [--threads 1,2]
        [--grammar json|letters] [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fill_scaling import WORDS, answer  # noqa: E402
from grammar_engines import load_vocab  # noqa: E402
from mask_cost import SCHEMAS  # noqa: E402


def native_tokenizer(tok, eos: list[int], slices: list[str]):
    """llguidance's own tokenizer from orcd's BPE `tokenizers` model, orcd's control tokens special."""
    import llguidance
    from tokenizers import AddedToken, Tokenizer

    from orcd.tokenizer.vocab import CONTROL

    hf = Tokenizer.from_str(tok._hf.to_str())
    hf.add_special_tokens([AddedToken(tok.vocab.tokens[i], special=True, normalized=False)
                           for i, t in enumerate(tok.vocab.types) if t == CONTROL])
    return llguidance.LLTokenizer(hf.to_str(), n_vocab=tok.vocab_size, eos_token=eos, slices=slices)


def differing_steps(tokenizers: dict, grammar: str, texts: list[list[int]], words: int) -> int:
    """Steps of the walks where the two tokenizers' masks differ."""
    import llguidance
    import torch

    n = 0
    for text in texts:
        ms = [llguidance.LLMatcher(lt, grammar, log_level=0) for lt in tokenizers.values()]
        masks = [torch.zeros(words, dtype=torch.int32) for _ in ms]
        for t in text:
            for m, mask in zip(ms, masks, strict=True):
                m.unsafe_compute_mask_ptr(mask.data_ptr(), 4 * words)
                m.consume_token(t)
            n += not torch.equal(*masks)
    return n


def walk(lltok, grammar: str, texts: list[list[int]], words: int, executor) -> dict:
    """Seconds of each step's masks while the rows walk their texts; executor None: serial."""
    import llguidance
    import torch

    ms = [llguidance.LLMatcher(lltok, grammar, log_level=0) for _ in texts]
    bitmask = torch.zeros((len(ms), words), dtype=torch.int32)
    times = []
    for step in range(min(len(t) for t in texts)):
        t0 = time.perf_counter()
        if executor is None:
            for i, m in enumerate(ms):
                m.unsafe_compute_mask_ptr(bitmask.data_ptr() + 4 * words * i, 4 * words)
        else:
            executor.unsafe_compute_mask_ptr([(m, i) for i, m in enumerate(ms)], bitmask.data_ptr(),
                                             4 * words, len(ms))
        times.append(time.perf_counter() - t0)
        for m, text in zip(ms, texts, strict=True):
            m.consume_token(text[step])
    return {"mean_ms": 1e3 * statistics.mean(times), "median_ms": 1e3 * statistics.median(times),
            "rows_in_error": sum(m.is_error() for m in ms)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--grammar", default="json", choices=["json", "letters"])
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    import llguidance

    from orcd.structured.backend import MASK_SLICES, GrammarBackend
    from orcd.structured.grammars import json_schema_grammar, regex_grammar

    tok = load_vocab("qwen2")
    backend = GrammarBackend(tok)
    tokenizers = {"callback": backend.lltok,
                  "native": native_tokenizer(tok, backend.eos_ids, list(MASK_SLICES))}
    rng = random.Random(0)
    if a.grammar == "json":
        grammar = json_schema_grammar(SCHEMAS["plain"], "schema")
        texts = [tok.encode(answer(rng))[: a.tokens] for _ in range(a.rows)]
    else:
        grammar = regex_grammar("[a-z ]{0,4000}", "letters")
        lines = [" ".join(rng.choice(WORDS) for _ in range(a.tokens)) for _ in range(a.rows)]
        texts = [tok.encode(line)[: a.tokens] for line in lines]
    modes = [("serial", None)] + [(f"executor {n}", llguidance.LLExecutor(n))
                                  for n in map(int, a.threads.split(","))]
    rows = []
    for _ in range(a.rounds):
        for name, lltok in tokenizers.items():
            for mode, executor in modes:
                r = {"tokenizer": name, "mode": mode} | walk(lltok, grammar, texts, backend.words, executor)
                rows.append(r)
                print(f"{name:8} {mode:11} masks ms a step: mean {r['mean_ms']:.3f} median "
                      f"{r['median_ms']:.3f}  rows in error {r['rows_in_error']}", flush=True)
    differ = differing_steps(tokenizers, grammar, texts, backend.words)
    print(f"steps whose masks differ between the tokenizers: {differ} of {sum(map(len, texts))}")
    if a.out:
        res = {"command": " ".join(["python", *sys.argv]), "rows": rows, "differing_steps": differ}
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
