#!/bin/bash
# Issue 21 on a 2-GPU host, in one command (repo root; OUT = a folder for the logs and tables):
#   1. tests/distributed/test_tp_nccl_gpu.py: greedy TP=2 == TP=1, seeded batch invariance at TP=2,
#      `orcd serve --tensor-parallel 2` streams / cancels / disconnect storm / SIGTERM, no process left;
#   2. bench/tp/tp_scaling.py on a Qwen2.5-7B-shaped Q4_K_M file (synthesized meanwhile), TP 1 and 2,
#      decode at 1/8/32/64 streams, prefill 512; modes $TP_MODES (default: TP with decode graphs, and the
#      plain single-GPU engine as the baseline).
# Wheels for what the device image lacks (fastapi, uvicorn, pydantic, gguf...) come in .whl-tp (carried).
# NVLink multicast stays off here and in every rank (orcd.distributed.runtime.RANK_ENV sets it too).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/tp-out}
BUDGET=${TP_BUDGET_S:-285}  # seconds for the whole script
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl-tp/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count(),
  "nccl", torch.cuda.nccl.version())' 2>&1 | tee -a "$OUT/env.txt"

F=/tmp/q7b.gguf
(python3 -m orcd synth --like qwen2.5-7b --quant Q4_K_M "$F" >"$OUT/synth.log" 2>&1) &
SYNTH=$!

timeout 150 python3 -m pytest -q -p no:cacheprovider -rA tests/distributed/test_tp_nccl_gpu.py \
  2>&1 | tee "$OUT/nccl_tests.log"
wait $SYNTH
left=$((BUDGET - SECONDS))
echo "bench: ${left} s left" | tee "$OUT/bench.log"
if [ "$left" -gt 40 ] && [ -f "$F" ]; then
  timeout "$left" python3 bench/tp/tp_scaling.py --file "$F" --ranks 1,2 --streams 1,8,32,64 \
    --modes "${TP_MODES:-tp-graphs,engine}" --prompt-len 512 --decode-tokens 64 --out "$OUT" 2>&1 \
    | tee -a "$OUT/bench.log"
fi
echo "=== summary (${SECONDS} s)"
grep -E "passed|failed|error" "$OUT/nccl_tests.log" | tail -3
grep -E "^\| " "$OUT/bench.log" || echo "no bench table (see bench.log)"
