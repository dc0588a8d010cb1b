"""`orcd tokenize`: tokenize (or --decode) with the vocabulary inside a GGUF file.

    orcd tokenize --model M.gguf "Hello world"        -> 9906 1917   (ids, space-separated)
    printf '"Hello"\\n"world"\\n' | orcd tokenize --model M.gguf   -> one JSON array of ids per line
    orcd tokenize --model M.gguf --decode "9906 1917"  -> Hello world
    printf '[9906]\\n[1917]\\n' | orcd tokenize --model M.gguf --decode  -> one JSON string per line

Like llama.cpp's test vectors, no BOS/EOS is added and special-token text is not parsed unless asked.
"""

from __future__ import annotations

import argparse
import json
import sys

from orcd.errors import TokenizerError
from orcd.gguf import open_gguf
from orcd.tokenizer.tokenizer import GGUFTokenizer, load_tokenizer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="GGUF file whose vocabulary to use")
    parser.add_argument("--add-special", action="store_true", help="add BOS/EOS as the file says")
    parser.add_argument("--parse-special", action="store_true",
                        help="turn special-token text such as <|im_end|> into its token")
    parser.add_argument("--decode", action="store_true", help="ids -> text instead of text -> ids")
    parser.add_argument("text", nargs="?", help="text (or space-separated ids with --decode); "
                        "without it, standard input is read as JSON lines")


def _parse_ids(raw: str, where: str) -> list[int]:
    try:
        return [int(x) for x in raw.split()]
    except ValueError:
        raise TokenizerError(f"{where}: expected space-separated integer token ids") from None


def _json_line(line: str, n: int, want: type) -> object:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        value = None
    ok = isinstance(value, want) and (want is str or all(isinstance(i, int) for i in value))
    if not ok:
        kind = "a JSON string" if want is str else "a JSON array of integer ids"
        raise TokenizerError(f"stdin line {n}: expected {kind}")
    return value


def _run_stdin(tok: GGUFTokenizer, args: argparse.Namespace) -> None:
    for n, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        if args.decode:
            ids = _json_line(line, n, list)
            print(json.dumps(tok.decode(ids), ensure_ascii=False))  # type: ignore[arg-type]
        else:
            text = _json_line(line, n, str)
            print(json.dumps(tok.encode(text, args.add_special, args.parse_special)))  # type: ignore[arg-type]
        sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    tok = load_tokenizer(open_gguf(args.model).metadata)
    if args.text is None:
        _run_stdin(tok, args)
    elif args.decode:
        sys.stdout.write(tok.decode(_parse_ids(args.text, "TEXT")) + "\n")
    else:
        print(" ".join(map(str, tok.encode(args.text, args.add_special, args.parse_special))))
    return 0
