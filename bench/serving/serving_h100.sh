#!/usr/bin/env bash
# Issue 19 on one H100: HTTP ÷ engine for the 0.5B and 7B shapes (streamed generate and chat at 1/8/32/64
# streams, engine and HTTP alternated on the same requests) and the mixed Poisson load with its engine
# baseline; rows tagged s10 merged into bench/results/serving.json + .md + .png, copied to $OUT/serving.
# Model files are synthesized here (random weights, real shapes). Time: ~45 s of synth, then serving.py
# under --max-seconds (default 240: later rounds are skipped and said so).
# Usage (device tool, kind nvidia-h100-x1, carry .whl-gpu): bash bench/serving/serving_h100.sh [MAX_SECONDS]
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/serving"
if [ -d .whl-gpu ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl-gpu/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/serving/gpu.txt"
t0=$(date +%s)
[ -f /tmp/q.gguf ] || python3 -m orcd synth --like qwen2.5-0.5b --quant Q4_K_M /tmp/q.gguf > "$OUT/serving/synth.log" 2>&1 &
[ -f /tmp/7b.gguf ] || python3 -m orcd synth --like qwen2.5-7b --quant Q4_K_M /tmp/7b.gguf >> "$OUT/serving/synth.log" 2>&1 &
wait
echo "synth: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/serving/synth.log"
python3 bench/serving/serving.py --model 0.5b=/tmp/q.gguf --model 7b=/tmp/7b.gguf --server "s10=." \
  --mixed-tags s10 --repeat 3 --mixed-seconds 5 --max-seconds "${1:-240}" --out-dir bench/results \
  2>&1 | tee "$OUT/serving/serving.log"
rc=${PIPESTATUS[0]}
cp bench/results/serving.json bench/results/serving.md bench/results/serving-*-s10.log "$OUT/serving/" 2>/dev/null
cp bench/results/serving.png "$OUT/serving/" 2>/dev/null
grep -h "prefill CUDA graphs" bench/results/serving-*-s10.log
grep -E "^\[|wrote" "$OUT/serving/serving.log" | tail -45
exit "$rc"
