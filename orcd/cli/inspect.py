"""`orcd inspect PATH`: a readable summary of a GGUF file (reads the header only, no weights)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

from orcd.errors import GGUFError
from orcd.gguf.config import model_config_from_gguf
from orcd.gguf.reader import GGUFFile, open_gguf


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="GGUF file")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def summarize(f: GGUFFile) -> dict[str, Any]:
    md = f.metadata
    arch = md.get("general.architecture")
    summary: dict[str, Any] = {
        "file": str(f.path), "file_size": f.file_size, "gguf_version": f.version,
        "name": md.get("general.name"), "architecture": arch,
        "parameters": sum(t.n_elements for t in f.tensors.values()), "tensors": len(f.tensors),
        "quant_types": dict(Counter(t.qtype.name for t in f.tensors.values()).most_common()),
        "tokenizer_model": md.get("tokenizer.ggml.model"), "tokenizer_pre": md.get("tokenizer.ggml.pre"),
        "vocab_size": len(md.get("tokenizer.ggml.tokens") or []) or None,
        "chat_template": isinstance(md.get("tokenizer.chat_template"), str),
        "context_length": md.get(f"{arch}.context_length") if isinstance(arch, str) else None,
    }
    try:
        cfg = model_config_from_gguf(f)
        summary.update(layers=cfg.n_layers, hidden=cfg.hidden_size, ffn=cfg.ffn_size, heads=cfg.n_heads,
                       kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim, rope_theta=cfg.rope_theta,
                       tied_embeddings=cfg.tied_embeddings)
        if cfg.n_experts:  # mixture of experts: the ffn of each expert, k of n routed per token
            summary.update(experts=cfg.n_experts, experts_used=cfg.n_experts_used, ffn=cfg.expert_ffn_size)
    except GGUFError as err:  # a vocabulary-only or foreign file: still worth a summary
        summary["config_error"] = str(err)
    return summary


def _lines(s: dict[str, Any]) -> list[str]:
    params = s["parameters"]
    out = [
        f"file            {s['file']} ({_size(s['file_size'])}, GGUF v{s['gguf_version']})",
        f"name            {s['name'] or '-'}",
        f"architecture    {s['architecture'] or '-'}",
        f"parameters      {params:,} ({params / 1e9:.2f} B)" if params else "parameters      0 (no tensors)",
        f"context length  {s['context_length'] or '-'}",
    ]
    if "layers" in s:
        out.append(f"shape           {s['layers']} layers, hidden {s['hidden']}, ffn {s['ffn']}, "
                   f"{s['heads']}/{s['kv_heads']} heads of {s['head_dim']}, rope theta {s['rope_theta']:g}, "
                   f"{'tied' if s['tied_embeddings'] else 'untied'} embeddings")
        if "experts" in s:
            out[-1] += f", {s['experts']} experts ({s['experts_used']} per token)"
    types = ", ".join(f"{k} x{v}" for k, v in s["quant_types"].items()) or "-"
    out += [
        f"quant types     {types} ({s['tensors']} tensors)",
        f"tokenizer       {s['tokenizer_model'] or '-'} (pre: {s['tokenizer_pre'] or '-'}), "
        f"{s['vocab_size'] or 0} tokens",
        f"chat template   {'yes' if s['chat_template'] else 'no'}",
    ]
    if "config_error" in s:
        out.append(f"note            {s['config_error']}")
    return out


def run(args: argparse.Namespace) -> int:
    summary = summarize(open_gguf(args.path))
    print(json.dumps(summary, indent=2) if args.json else "\n".join(_lines(summary)))
    return 0
