#!/usr/bin/env bash
# The mask's share of the decode step at 64 streams with llguidance's default tokenizer slices, then with
# orcd's (orcd.structured.backend.MASK_SLICES), on one GPU, same machine, back to back; plain and bounded
# schemas; paths mask (every constrained row filled each step) and auto (the default). Run from the repo
# root with .whl-gpu carried: bash bench/structured/slices_ab.sh [MODEL.gguf] [OUT]
# Prints bench/structured/mask_report.py's table of both runs last (OUT/mask_cost.md).
set -euo pipefail
model=${1:-/tmp/q05.gguf}
out=${2:-${OUT:-/tmp/out}/slices_ab}
if [ -d .whl-gpu ] && ! python3 -c "import llguidance, gguf" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-gpu/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
[ -f "$model" ] || python3 -m orcd synth --like qwen2.5-0.5b --quant Q4_K_M "$model"
mkdir -p "$out"
for s in default orcd; do
  python3 bench/structured/mask_cost.py --model "$model" --tag "slices-$s" --slices "$s" --schemas plain,bounded \
    --concurrency 64 --steps 64 --paths mask,auto --check-free --out "$out" | tee "$out/slices-$s.txt"
done
python3 bench/structured/mask_cost.py --report "$out/mask_cost_slices-default.json" "$out/mask_cost_slices-orcd.json" \
  --out "$out"
grep -E '^\| (code|slices-)' "$out/mask_cost.md"
