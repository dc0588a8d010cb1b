#!/bin/bash
# Issue 16, --dense-batch-rows (helper D16) on one H100: STAGE=1 the GPU tests of the dense route and the
# R-row graph steps quantized vs dense (bench/peers/dense_step.py); STAGE=2 the 7B engine with the route
# off and on in one process (bench/peers/orcd_side.py --dense-batch-rows off,8), weights bytes for both.
# Run from the repository root on the device with $OUT set (carry .whl-gpu):
#   STAGE=1 bash bench/peers/dense_device.sh; STAGE=2 bash bench/peers/dense_device.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl-gpu/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi -L
[ -f /tmp/7b.gguf ] || python3 -m orcd synth --like qwen2.5-7b --quant Q4_K_M /tmp/7b.gguf > "$OUT/synth7b.log" 2>&1 &
s7=$!
if [ "${STAGE:-1}" = 1 ]; then
  timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_dense_decode.py > "$OUT/dense_gpu_tests.txt" 2>&1
  echo "tests rc $?"; tail -3 "$OUT/dense_gpu_tests.txt"
  wait $s7
  timeout 240 python3 bench/peers/dense_step.py /tmp/7b.gguf "$OUT/dense_step_7b.json" --rows 8,32,64 \
    > "$OUT/dense_step_7b.txt" 2>&1; echo "step rc $?"
  grep -E "^weights|^rows|^ +[0-9]+ +[0-9.]+ +[0-9.]+ " "$OUT/dense_step_7b.txt"
else
  wait $s7
  timeout 500 python3 bench/peers/orcd_side.py /tmp/7b.gguf "$OUT/orcd_7b_dense.json" --streams 1,8,32,64 \
    --dense-batch-rows off,8 > "$OUT/orcd_7b_dense.txt" 2>&1; echo "engine rc $?"
  tail -3 "$OUT/orcd_7b_dense.txt"
fi
