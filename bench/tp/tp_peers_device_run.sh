#!/bin/bash
# Issue 21 on a 2-GPU host in one command (repo root; carry .whl-gpu and .peers; OUT = logs and tables;
# COMMIT = the commit measured; every stage has a time limit and writes its results as it goes):
#   (a) llama.cpp's llama-bench + llama-batched-bench build starts in the background (nice 19);
#   synthesize the qwen2.5-7b Q4_K_M file;
#   (d) bench/tp/tp_scaling.py on it at TP 1 and 2: decode at 1/8/32/64 streams, prefill 512;
#   (b) GPU tests: tests/gpu/test_fused_decode.py on GPU 0 beside the NCCL tests (greedy TP=2 == one GPU,
#       the int8 TP fused step == one GPU's) on both;
#   (e) after the build: bench/tp/llama_split.py, -sm none (GPU 0), layer and row (both GPUs), same file;
#   then peers_tp.json / .md (orcd TP=1 beside `none`, TP=2 beside `layer` and `row`).
# NVLink multicast stays off here and in every rank (orcd.distributed.runtime.RANK_ENV sets it too).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/tp-out}
BUDGET=${TP_BUDGET_S:-310}  # seconds for the whole script
COMMIT=${COMMIT:-unknown}
mkdir -p "$OUT"
left() { echo $((BUDGET - SECONDS)); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  "${WHL:-.whl-gpu}"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
W=/tmp/peers
mkdir -p "$W"
(python3 - "$W" >"$OUT/build_start.log" 2>&1 <<'EOF'
import sys, time
from pathlib import Path
sys.path.insert(0, "bench/peers")
import llama_side
proc, t0 = llama_side.start_build(llama_side.SRC_TAR, Path(sys.argv[1]) / "llama", jobs=32)
rc = proc.wait()
Path(sys.argv[1], "build.rc").write_text(f"{rc} {time.perf_counter() - t0:.0f}\n")
EOF
) &
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count(),
  "nccl", torch.cuda.nccl.version())' 2>&1 | tee -a "$OUT/env.txt"
F7=/tmp/q7b.gguf
timeout 60 python3 -m orcd synth --like qwen2.5-7b --quant Q4_K_M "$F7" >"$OUT/synth7.log" 2>&1
echo "[synth] done at ${SECONDS} s"

mkdir -p "$OUT/7b"
timeout 175 python3 bench/tp/tp_scaling.py --file "$F7" --ranks 1,2 --streams 1,8,32,64 --modes tp-graphs \
  --prompt-len 512 --decode-tokens 64 --out "$OUT/7b" >"$OUT/7b/bench.log" 2>&1
echo "[orcd tp 1,2] rc $? at ${SECONDS} s"

T=$(( $(left) - 70 )); [ "$T" -gt 100 ] && T=100
if [ "$T" -gt 20 ]; then
  (CUDA_VISIBLE_DEVICES=0 timeout "$T" python3 -m pytest -q -p no:cacheprovider -rA \
    tests/gpu/test_fused_decode.py >"$OUT/gpu_fused_decode.log" 2>&1) &
  FD=$!
  timeout "$T" python3 -m pytest -q -p no:cacheprovider -rA \
    "tests/distributed/test_tp_nccl_gpu.py::test_tp_fused_int8_step_matches_one_gpu" \
    "tests/distributed/test_tp_nccl_gpu.py::test_two_nccl_ranks_match_one_gpu" >"$OUT/nccl_tests.log" 2>&1
  wait $FD
fi
echo "[tests] done at ${SECONDS} s"

while [ ! -f "$W/build.rc" ] && [ "$(left)" -gt 60 ]; do sleep 2; done
echo "[build] $(cat "$W/build.rc" 2>/dev/null || echo 'not finished') at ${SECONDS} s"
tail -5 "$W/llama/build.log" >"$OUT/llama_build_tail.log" 2>/dev/null
if [ -f "$W/build.rc" ] && [ "$(left)" -gt 15 ]; then
  timeout $(( $(left) - 5 )) python3 bench/tp/llama_split.py measure --bin "$W/llama/build/bin" --file "$F7" \
    --out "$OUT/llama_split.json" --budget $(( $(left) - 10 )) >"$OUT/llama_split.log" 2>&1
fi
python3 bench/tp/llama_split.py report --tp "$OUT/7b/tp.json" --llama "$OUT/llama_split.json" --out "$OUT" \
  --commit "$COMMIT" >/dev/null 2>&1
echo "=== summary (${SECONDS} s)"
grep -hE "passed|failed|error" "$OUT/nccl_tests.log" "$OUT/gpu_fused_decode.log" 2>/dev/null | tail -4
cat "$OUT/7b/tp.md" "$OUT/peers_tp.md" 2>/dev/null || echo "no tables (see the logs)"
