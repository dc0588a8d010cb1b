#!/bin/bash
# Issue 20's expert-grouped int8 MoE on one GPU. Stages (STAGES, default "tests rows"):
#   tests  the GPU tests of moe_grouped_i8 and of the int8 step (per-pair and grouped) in CUDA graphs
#   rows   per-layer int8 MoE MLP, per-pair vs grouped, at TOKENS (moe_grouped_sweep.py)
#   sweep  the same plus launch sweeps of the grouped kernels and norm_route's router step
#   e2e    the engine on the gpt-oss-20b synth: the runner's own graphs (int8 per-pair MoE, the default)
#          against GptOssDecoder(moe_grouped=True) (gpt_oss_fused.py --grouped --no-float)
# Everything under $OUT. usage (device, repo root, after the .whl-gpu install line):
#   STAGES="tests sweep" bash bench/kernels/gpt_oss_grouped_run.sh
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
STAGES=${STAGES:-tests rows}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | tee -a "$OUT/gpu.txt"
git log --oneline -1 2>/dev/null | tee -a "$OUT/gpu.txt"
has() { [[ " $STAGES " == *" $1 "* ]]; }
if has tests; then
  timeout "${TESTS_S:-150}" python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_moe_grouped_i8.py \
    tests/gpu/test_gpt_oss_int8.py > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests rc=$?"; tail -4 "$OUT/gpu_tests.txt"
fi
if has rows || has sweep; then
  timeout "${SWEEP_S:-150}" python3 bench/kernels/moe_grouped_sweep.py "$OUT/moe_grouped_sweep.json" \
    --tokens "${TOKENS:-1,8}" $(has sweep && echo --sweep) > "$OUT/moe_grouped_sweep.txt" 2>&1
  echo "sweep rc=$?"; tail -30 "$OUT/moe_grouped_sweep.txt"
fi
if has e2e; then
  [ -f /tmp/g.gguf ] || python3 -m orcd synth --like gpt-oss-20b --quant MXFP4 /tmp/g.gguf > "$OUT/synth.txt" 2>&1
  timeout "${E2E_S:-400}" python3 bench/kernels/gpt_oss_fused.py /tmp/g.gguf "$OUT/gpt_oss_grouped.json" \
    --streams "${STREAMS:-1,8}" --profile "${PROFILE:-1,8}" --grouped --no-float > "$OUT/gpt_oss_grouped.txt" 2>&1
  echo "e2e rc=$?"; grep -v "^   " "$OUT/gpt_oss_grouped.txt" | tail -30; grep -A12 "^-- " "$OUT/gpt_oss_grouped.txt" | head -60
fi
