"""The modules the loader's tokenizer thread runs are imported with the loader, on the importing thread:
imported on that side thread while the warm-up and main threads imported others, two loads on the H200
host failed with ModuleNotFoundError for modules that exist (orcd.tokenizer.build, jinja2.defaults)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import orcd.loading.loader
print(" ".join(m for m in sys.argv[1:] if m not in sys.modules))
"""
TOKENIZER_MODULES = ["orcd.tokenizer", "orcd.tokenizer.build", "orcd.tokenizer.chat", "jinja2",
                     "jinja2.sandbox", "tokenizers", "sentencepiece"]


def test_importing_the_loader_imports_the_tokenizers_modules():
    out = subprocess.run([sys.executable, "-c", PROBE, *TOKENIZER_MODULES], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "", f"not imported with the loader: {out.stdout.strip()}"
