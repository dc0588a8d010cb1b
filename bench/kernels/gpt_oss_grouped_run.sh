#!/bin/bash
# Issue 20's expert-grouped int8 MoE on one GPU, one call: the GPU tests of moe_grouped_i8 and of the int8
# step in CUDA graphs, the per-layer MoE MLP per-pair vs grouped (moe_grouped_sweep.py), and with E2E=1 the
# engine on the gpt-oss-20b synth (gpt_oss_fused.py: int8 per-pair vs grouped). Everything under $OUT.
# usage (device, repo root, after the .whl-gpu install line): [E2E=1] bash bench/kernels/gpt_oss_grouped_run.sh
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | tee "$OUT/gpu.txt"
git log --oneline -1 | tee -a "$OUT/gpu.txt"
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_moe_grouped_i8.py \
  tests/gpu/test_gpt_oss_int8.py > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -4 "$OUT/gpu_tests.txt"
timeout "${SWEEP_S:-120}" python3 bench/kernels/moe_grouped_sweep.py "$OUT/moe_grouped_sweep.json" \
  --tokens "${TOKENS:-1,8}" ${SWEEP:+--sweep} > "$OUT/moe_grouped_sweep.txt" 2>&1
echo "sweep rc=$?"; tail -12 "$OUT/moe_grouped_sweep.txt"
if [ -n "$E2E" ]; then
  [ -f /tmp/g.gguf ] || python3 -m orcd synth --like gpt-oss-20b --quant MXFP4 /tmp/g.gguf > "$OUT/synth.txt" 2>&1
  python3 bench/kernels/gpt_oss_fused.py /tmp/g.gguf "$OUT/gpt_oss_grouped.json" --streams "${STREAMS:-1,8}" \
    --profile "${PROFILE:-1,8}" --int8 --grouped --no-float > "$OUT/gpt_oss_grouped.txt" 2>&1
  echo "e2e rc=$?"; grep -v "^ " "$OUT/gpt_oss_grouped.txt" | tail -40
fi
