#!/bin/bash
# Issue 21 on a 4-GPU host in one command (repo root; OUT = a folder for logs and tables; each stage
# has a time limit and writes its results as it goes):
#   in parallel: synthesize the qwen2.5-72b Q4_K_M file (47 GB, into /dev/shm when it has room) and the
#   7B one; the NCCL greedy test (TP=2 == one GPU, decode graphs of the TP fused step) on GPUs 0,1;
#   tp_scaling.py on the 7B file, TP 1 and 2, on GPUs 2,3;
#   then tp_scaling.py on the 72B file at TP 4, 2, 1 (all GPUs) with the time left.
# Wheels for what the device image lacks come in $WHL (default .whl-gpu, carried).
# NVLink multicast stays off here and in every rank (orcd.distributed.runtime.RANK_ENV sets it too).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/tp-out}
BUDGET=${TP_BUDGET_S:-300}  # seconds for the whole script
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  "${WHL:-.whl-gpu}"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count(),
  "nccl", torch.cuda.nccl.version())' 2>&1 | tee -a "$OUT/env.txt"
nvidia-smi topo -m >>"$OUT/env.txt" 2>&1
D=/tmp
[ "$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1)" -gt 60 ] 2>/dev/null && D=/dev/shm
df -h "$D" | tee -a "$OUT/env.txt"
F72=$D/q72b.gguf F7=$D/q7b.gguf
(python3 -m orcd synth --like qwen2.5-72b --quant Q4_K_M "$F72" >"$OUT/synth72.log" 2>&1) &
SYNTH72=$!
python3 -m orcd synth --like qwen2.5-7b --quant Q4_K_M "$F7" >"$OUT/synth7.log" 2>&1

(CUDA_VISIBLE_DEVICES=0,1 timeout 120 python3 -m pytest -q -p no:cacheprovider -rA \
  "tests/distributed/test_tp_nccl_gpu.py::test_two_nccl_ranks_match_one_gpu" >"$OUT/nccl_tests.log" 2>&1) &
TESTS=$!
mkdir -p "$OUT/7b" "$OUT/72b"
CUDA_VISIBLE_DEVICES=2,3 timeout 170 python3 bench/tp/tp_scaling.py --file "$F7" --ranks 1,2 \
  --streams 1,8,32,64 --modes tp-graphs --prompt-len 512 --decode-tokens 64 --out "$OUT/7b" \
  >"$OUT/7b/bench.log" 2>&1
wait $TESTS $SYNTH72
tail -3 "$OUT/synth72.log"
left=$((BUDGET - SECONDS))
echo "72b bench: ${left} s left" | tee "$OUT/72b/bench.log"
if [ "$left" -gt 40 ] && [ -f "$F72" ]; then
  timeout "$left" python3 bench/tp/tp_scaling.py --file "$F72" --ranks 4,2,1 --streams 1,8,32 \
    --modes tp-graphs --prompt-len 512 --decode-tokens 32 --out "$OUT/72b" >>"$OUT/72b/bench.log" 2>&1
fi
echo "=== summary (${SECONDS} s)"
grep -E "passed|failed|error" "$OUT/nccl_tests.log" | tail -3
cat "$OUT/7b/tp.md" "$OUT/72b/tp.md" 2>/dev/null || echo "no tables (see the bench logs)"
