#!/bin/bash
# Issue 20: GptOssDecoder(fuse_quant=True) on one GPU (the lead's command; everything under $OUT).
#   1. GPU tests: tests/gpu/test_gpt_oss_fuse_quant.py (each fused producer's int8 words and scales against
#      quantize_x, small and gpt-oss-20b shapes, 1 and 8 rows; the fused int8 step against the unfused one)
#      and tests/gpu/test_gpt_oss_int8.py (the int8 step in CUDA graphs against model.forward);
#   2. the gpt-oss-20b synth (/tmp/g.gguf, reused if there) through the engine: the fused int8 step with
#      fuse_quant off (fused_int8) and each of VARIANTS' parts (fused_int8_fq_*), 1 and 8 streams, tok/s and
#      per-kernel profiles (bench/kernels/gpt_oss_fused.py --fuse-quant "$VARIANTS" --no-float).
# usage (device, repo root, after the .whl-gpu install line): bash bench/kernels/gpt_oss_fuse_quant_run.sh
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | tee -a "$OUT/gpu.txt"
git log --oneline -1 2>/dev/null | tee -a "$OUT/gpu.txt"
timeout "${TESTS_S:-150}" python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpt_oss_fuse_quant.py \
  tests/gpu/test_gpt_oss_int8.py > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -6 "$OUT/gpu_tests.txt"
[ -f /tmp/g.gguf ] || python3 -m orcd synth --like gpt-oss-20b --quant MXFP4 /tmp/g.gguf > "$OUT/synth.txt" 2>&1
timeout "${E2E_S:-400}" python3 bench/kernels/gpt_oss_fused.py /tmp/g.gguf "$OUT/gpt_oss_fuse_quant.json" \
  --streams "${STREAMS:-1,8}" --profile "${PROFILE:-1,8}" --fuse-quant "${VARIANTS:-o;o,h;all}" --no-float > "$OUT/gpt_oss_fuse_quant.txt" 2>&1
echo "e2e rc=$?"; grep -A10 "^-- " "$OUT/gpt_oss_fuse_quant.txt" | head -48
grep -v "^   " "$OUT/gpt_oss_fuse_quant.txt" | grep -v "^--" | tail -6
