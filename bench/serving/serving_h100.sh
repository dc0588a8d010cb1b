#!/usr/bin/env bash
# Issue 19 on one H100: HTTP ÷ engine for the 0.5B and 7B shapes (streamed generate and chat at 1/8/32/64
# streams, engine and HTTP alternated on the same requests) and the mixed Poisson load with its engine
# baseline; rows tagged TAG (default s10) merged into bench/results/serving.json + .md + .png, copied to
# $OUT/serving. Model files are synthesized here (random weights, real shapes). Time: ~45 s of synth (one
# model: ~25 s), then serving.py under MAX_SECONDS (default 240: later rounds are skipped and said so).
# Options: --models 0.5b[,7b]  --streams 1,8[,...]  --tag TAG  --no-mixed (no Poisson load)
#          --ab (first, the engine alone: short cached prefixes taken vs recomputed, prefix_hit_ab.py)
# Usage (device tool, kind nvidia-h100-x1, carry .whl-gpu): bash bench/serving/serving_h100.sh [OPTIONS] [MAX_SECONDS]
# Chat at 8 streams, < 120 s: bash bench/serving/serving_h100.sh --models 0.5b --streams 1,8 --tag s11-chat8 --no-mixed --ab 60
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
MODELS=0.5b,7b STREAMS=1,8,32,64 TAG=s10 MIXED=1 AB=0 MAX=240
while [ $# -gt 0 ]; do
  case "$1" in
    --models) MODELS=$2; shift 2 ;;
    --streams) STREAMS=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --no-mixed) MIXED=0; shift ;;
    --ab) AB=1; shift ;;
    *) MAX=$1; shift ;;
  esac
done
mkdir -p "$OUT/serving"
if [ -d .whl-gpu ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl-gpu/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/serving/gpu.txt"
t0=$(date +%s)
model_args=()
case ",$MODELS," in *,0.5b,*)
  [ -f /tmp/q.gguf ] || python3 -m orcd synth --like qwen2.5-0.5b --quant Q4_K_M /tmp/q.gguf > "$OUT/serving/synth.log" 2>&1 &
  model_args+=(--model 0.5b=/tmp/q.gguf) ;;
esac
case ",$MODELS," in *,7b,*)
  [ -f /tmp/7b.gguf ] || python3 -m orcd synth --like qwen2.5-7b --quant Q4_K_M /tmp/7b.gguf >> "$OUT/serving/synth.log" 2>&1 &
  model_args+=(--model 7b=/tmp/7b.gguf) ;;
esac
wait
echo "synth: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/serving/synth.log"
if [ "$AB" = 1 ]; then
  python3 bench/serving/prefix_hit_ab.py --model /tmp/q.gguf --streams "$STREAMS" --repeat 3 \
    --out "$OUT/serving/prefix_hit_ab.json" > "$OUT/serving/prefix_hit_ab.log" 2>&1
fi
mixed=(--mixed-tags "$TAG" --mixed-seconds 5)
[ "$MIXED" = 1 ] || mixed=(--mixed-rates "")
python3 bench/serving/serving.py "${model_args[@]}" --server "$TAG=." --streams "$STREAMS" "${mixed[@]}" \
  --repeat 3 --max-seconds "$MAX" --out-dir bench/results 2>&1 | tee "$OUT/serving/serving.log"
rc=${PIPESTATUS[0]}
cp bench/results/serving.json bench/results/serving.md bench/results/serving-*-"$TAG".log "$OUT/serving/" 2>/dev/null
cp bench/results/serving.png "$OUT/serving/" 2>/dev/null
grep -h "prefill CUDA graphs" bench/results/serving-*-"$TAG".log
[ "$AB" = 1 ] && tail -12 "$OUT/serving/prefix_hit_ab.log"
grep -E "^\[|wrote" "$OUT/serving/serving.log" | tail -45
exit "$rc"
