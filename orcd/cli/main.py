"""`orcd` command line: serve | generate | tokenize | inspect | bench | pull | synth.

Each subcommand lives in the module that owns it; this file only dispatches.
Errors of type OrcdError print one line to stderr and exit 2 (no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from orcd.errors import OrcdError

# subcommand -> (module, help). Each module provides add_arguments(parser) and run(args) -> int.
SUBCOMMANDS = {
    "serve": ("orcd.cli.serve", "serve a model over HTTP (SSE + OpenAI API)"),
    "generate": ("orcd.cli.generate", "generate a completion, streamed to stdout"),
    "tokenize": ("orcd.cli.tokenize", "tokenize text with the model file's vocabulary"),
    "inspect": ("orcd.cli.inspect", "print a summary of a GGUF file"),
    "pull": ("orcd.cli.pull", "download a GGUF from the Hugging Face Hub"),
    "synth": ("orcd.cli.synth", "write a random-weight GGUF shaped like a real model"),
    "bench": ("orcd.cli.bench", "measure load, prefill and decode speed"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Import only the chosen subcommand's module (torch & co. make each import take seconds)."""
    parser = argparse.ArgumentParser(prog="orcd", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue  # subcommand not built yet
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = build_parser(chosen).parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except OrcdError as err:
        print(f"orcd {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
