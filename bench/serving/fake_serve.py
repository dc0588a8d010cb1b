"""`orcd serve` over the fake engine (fake_engine.py): every `orcd serve` argument, plus --fake-base-ms,
--fake-row-ms, --fake-prefill-ms, --fake-capture-ms (a prefill graph bucket's first use) and
--fake-lazy-graphs (no capture at start: buckets are paid for while serving), --fake-eager-ms (a step
admitting a cached prompt prefix runs eagerly: this much more) and --fake-min-prefix-hit (shorter cached
prefixes are recomputed; 0: every hit taken, the engine before issue 19's fix). Always an engine process
(it is what the fake replaces).

Usage: python bench/serving/fake_serve.py --model F.gguf --port 8000 [--api-processes N] [--fake-row-ms X]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spawned processes inherit sys.path
from fake_engine import FakeBuild, prefix_rule  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from orcd.cli import serve
    from orcd.cli.main import build_parser

    pre = argparse.ArgumentParser(add_help=False)
    for name, default in (("base", 0.95), ("row", 0.057), ("prefill", 0.01)):
        pre.add_argument(f"--fake-{name}-ms", type=float, default=default)
    pre.add_argument("--fake-capture-ms", type=float, default=0.0)
    pre.add_argument("--fake-lazy-graphs", action="store_true")
    pre.add_argument("--fake-eager-ms", type=float, default=0.0)
    pre.add_argument("--fake-min-prefix-hit", type=int, default=None)
    fake, rest = pre.parse_known_args(argv)
    args = build_parser("serve").parse_args(["serve", "--engine-process", *rest])

    def engine_build(args, path) -> FakeBuild:  # in place of the model's EngineBuild
        return FakeBuild(Path(path), fake.fake_base_ms, fake.fake_row_ms, fake.fake_prefill_ms,
                         args.max_num_seqs, args.max_num_batched_tokens, capture_ms=fake.fake_capture_ms,
                         warm_graphs=not fake.fake_lazy_graphs, eager_ms=fake.fake_eager_ms,
                         **prefix_rule(fake.fake_min_prefix_hit))

    serve.engine_build = engine_build  # this process only: the one place serve builds an engine
    return serve.run(args)


if __name__ == "__main__":
    sys.exit(main())
