#!/usr/bin/env bash
# The GPU half of CI, for a lent CUDA machine: the GPU tests and the decode benchmarks on the files they
# name, results under $OUT (default ./gpu-out). Missing pure-Python packages (gguf, fastapi, ...) are
# installed from wheels in $WHEELS when that folder exists (the device has no network).
#   usage: OUT=DIR WHEELS=DIR bash scripts/gpu_check.sh [pytest args...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ] && [ -d "$WHEELS" ]; then
  # only what is missing: pip resolves against the wheels folder and keeps what the machine has
  python3 -m pip install -q --no-index --find-links "$WHEELS" gguf fastapi uvicorn prometheus_client httpx \
    openai hypothesis pytest 2>&1 | tail -2
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
export PYTHONPATH=$PWD
python3 -m pytest -q -m gpu tests -p no:cacheprovider --durations=8 "$@" 2>&1 | tail -40 > "$OUT/gpu_tests.txt"
tail -3 "$OUT/gpu_tests.txt"
python3 -m orcd synth --like qwen2.5-0.5b --quant Q4_K_M /tmp/q05.gguf > /dev/null
python3 bench/decode/graph_vs_hf.py --file /tmp/q05.gguf --skip-hf --out "$OUT" 2>&1 | tail -12
python3 bench/decode/engine_decode.py --model /tmp/q05.gguf --out "$OUT" --skip-eager 2>&1 | tail -12
