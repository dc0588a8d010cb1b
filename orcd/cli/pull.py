"""`orcd pull REPO FILE`: download a GGUF into the Hugging Face cache (orcd.hub)."""

from __future__ import annotations

import argparse
import sys

from orcd.hub import HF_PREFIX, HubError, download


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("repo", help="model repository, e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF")
    p.add_argument("file", help="file in the repository, e.g. qwen2.5-0.5b-instruct-q4_k_m.gguf")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    p.add_argument("--cache-dir", default=None, help="cache folder (default: HF_HUB_CACHE)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.repo.count("/") != 1 or not all(args.repo.split("/")):
        raise HubError(f"bad repository {args.repo!r}: expected OWNER/NAME")
    path = download(args.repo, args.file, revision=args.revision, cache_dir=args.cache_dir,
                    progress=not args.quiet)
    print(path)
    print(f"use it with: --model {HF_PREFIX}{args.repo}/{args.file}", file=sys.stderr, flush=True)
    return 0
