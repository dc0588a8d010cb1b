#!/bin/bash
# Issue 16 (helper K16) on one H100: q6k_mmq / magic-number Q4_K products, their GPU tests, the 7B engine
# before/after (same process), then (STAGE=2) the R-row step profile before/after, the 0.5B engine
# before/after and the fused-step GPU tests. Run from the repository root on the device with $OUT set:
#   STAGE=1 bash bench/kernels/k16_device.sh; STAGE=2 bash bench/kernels/k16_device.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl-gpu/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi -L
[ -f /tmp/7b.gguf ] || python3 -m orcd synth --like qwen2.5-7b --quant Q4_K_M /tmp/7b.gguf > "$OUT/synth7b.log" 2>&1 &
s7=$!
if [ "${STAGE:-1}" = 1 ]; then
  timeout 240 python3 bench/kernels/mmq_q6k.py "$OUT/mmq_q6k.json" --ms 4,8,16,64 --sweep-ms 16,64 --jobs 12 \
    > "$OUT/products.log" 2>&1; echo "products rc $?"
  timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_q6k_mmq.py "tests/gpu/test_mmq.py::test_fused_linear_route" \
    > "$OUT/tests1.log" 2>&1
  echo "tests rc $?"; tail -3 "$OUT/tests1.log"
  wait $s7
  timeout 200 python3 bench/kernels/mmq_q6k.py "$OUT/engine_7b.json" --no-products --engine /tmp/7b.gguf \
    --streams 1,8,32,64 > "$OUT/engine_7b.log" 2>&1; echo "engine rc $?"
  grep -v "^\s*$" "$OUT/products.log" | grep "^|" ; grep "^engine" "$OUT/engine_7b.log"
else
  [ -f /tmp/05b.gguf ] || python3 -m orcd synth --like qwen2.5-0.5b --quant Q4_K_M /tmp/05b.gguf \
    > "$OUT/synth05.log" 2>&1 &
  s05=$!
  wait $s7
  timeout 150 python3 bench/peers/step_profile.py /tmp/7b.gguf "$OUT/step_rows_7b.json" --rows 8,64 --ab \
    > "$OUT/step_rows_7b.txt" 2>&1; echo "step rc $?"
  wait $s05
  timeout 120 python3 bench/kernels/mmq_q6k.py "$OUT/engine_05b.json" --no-products --engine /tmp/05b.gguf \
    --streams 1,8,32,64 > "$OUT/engine_05b.log" 2>&1; echo "engine 0.5B rc $?"
  timeout "${TESTS_S:-150}" python3 -m pytest -q -m gpu tests/gpu/test_fused_decode.py tests/gpu/test_batched_qkv.py \
    tests/gpu/test_mmq.py tests/gpu/test_batched_linear.py > "$OUT/tests2.log" 2>&1
  echo "tests2 rc $?"; tail -3 "$OUT/tests2.log"
  tail -6 "$OUT/step_rows_7b.txt"; grep "^engine" "$OUT/engine_05b.log"
fi
