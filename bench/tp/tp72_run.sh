#!/bin/bash
# Issue 21, the 72B on a 2- or 4-GPU host beside llama.cpp, in one command (repo root; carry .whl-gpu
# and .peers; OUT = logs and tables; COMMIT = the commit measured; TP_BUDGET_S = seconds for the whole
# script; TP_RANKS = the rank counts, largest first, default "2 1"; e.g. TP_RANKS="4 1" on 4 GPUs).
# Every stage has its own time limit and writes its results under $OUT as it goes:
#   (a) llama.cpp's llama-bench + llama-batched-bench build starts in the background (nice 19);
#       the qwen2.5-72b Q4_K_M file is synthesized (/dev/shm when it has room; kept if already there,
#       so a second call on the warm machine skips it);
#   (b) meanwhile on the GPUs: bench/tp/allreduce_latency.py (NCCL vs the symmetric-memory one-shot
#       all-reduce in CUDA graphs, and an exact-sum check of the latter), then the NCCL GPU test of the
#       int8 TP fused step with both all-reduces (this also compiles the Triton kernels);
#   (c) bench/tp/tp_scaling.py on the 72B: each of TP_RANKS (decode graphs, NCCL), 1/8/32/64 streams,
#       prefill 512;
#   (d) after the build: bench/tp/llama_split.py measure, -sm layer and row on all the GPUs and none
#       (one GPU), same file;
#   (e) with the time left: the largest TP with the symmetric-memory all-reduce (mode tp-symm);
#   then llama_split.py report -> $OUT/peers_tp.{json,md,png} (72B rows; merged into bench/results on
#   the CPU afterwards); at the end everything under $OUT goes into $OUT/tp72_all.tgz (the device tool
#   returns a limited count of files). On 2 H100s (87f2a80) a cold machine spent >120 s in the TP=2
#   stage compiling the 72B's Triton kernels (hence its 200 s cap); warm, TP=2 took 26 s and TP=1 49 s.
# Dry run on the CPU: TP72_DRY=1 bash bench/tp/tp72_run.sh (prints the stages, runs nothing).
# NVLink multicast stays off here and in every rank (orcd.distributed.runtime.RANK_ENV sets it too).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/tp-out}
BUDGET=${TP_BUDGET_S:-520}
COMMIT=${COMMIT:-unknown}
STREAMS=${TP_STREAMS:-1,8,32,64}
read -r -a RANKS <<<"${TP_RANKS:-2 1}"
TOP=${RANKS[0]}
mkdir -p "$OUT/72b_symm" "$OUT/ar"
for r in "${RANKS[@]}"; do mkdir -p "$OUT/72b_tp$r"; done
left() { echo $((BUDGET - SECONDS)); }
lim() { local t=$(( $(left) - $2 )); [ "$t" -gt "$1" ] && t=$1; echo "$t"; }  # min(cap, left - reserve)
stage() { echo "[$1] $(date -u +%T) at ${SECONDS} s, $(left) s left" | tee -a "$OUT/stages.log"; }
run() { if [ -n "${TP72_DRY:-}" ]; then echo "  would run: $*"; else "$@"; fi; }
if [ -z "${TP72_DRY:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${WHL:-.whl-gpu}"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/env.txt"
  python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count(),
    "nccl", torch.cuda.nccl.version())' 2>&1 | tee -a "$OUT/env.txt"
fi
W=/tmp/peers
mkdir -p "$W"
stage "build start"
[ -x "$W/llama/build/bin/llama-batched-bench" ] && echo "0 0" >"$W/build.rc"  # warm machine: built
if [ ! -f "$W/build.rc" ] && [ -z "${TP72_DRY:-}" ]; then
  (nice -n 19 python3 - "$W" >"$OUT/build_start.log" 2>&1 <<'PY'
import sys, time
from pathlib import Path
sys.path.insert(0, "bench/peers")
import llama_side
proc, t0 = llama_side.start_build(llama_side.SRC_TAR, Path(sys.argv[1]) / "llama", jobs=32)
rc = proc.wait()
Path(sys.argv[1], "build.rc").write_text(f"{rc} {time.perf_counter() - t0:.0f}\n")
PY
  ) &
fi
D=/tmp
[ "$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1)" -gt 60 ] 2>/dev/null && D=/dev/shm
F72=$D/q72b.gguf
df -h "$D" >>"$OUT/env.txt" 2>&1
stage "synth 72B into $D"
SYNTH=""
if [ ! -s "$F72.done" ]; then
  (run timeout 150 python3 -m orcd synth --like qwen2.5-72b --quant Q4_K_M "$F72" >"$OUT/synth72.log" 2>&1 \
    && echo ok >"$F72.done") &
  SYNTH=$!
fi
stage "all-reduce latency"
run timeout "$(lim 60 350)" python3 bench/tp/allreduce_latency.py --worlds "$TOP" --reps 100 --out "$OUT/ar" \
  >"$OUT/ar/allreduce.log" 2>&1
stage "GPU tests (int8 TP step, nccl and symm)"
run timeout "$(lim 90 300)" python3 -m pytest -q -p no:cacheprovider -rA \
  "tests/distributed/test_tp_nccl_gpu.py::test_tp_fused_int8_step_matches_one_gpu" >"$OUT/nccl_tests.log" 2>&1
[ -n "$SYNTH" ] && wait "$SYNTH"
tail -2 "$OUT/synth72.log" 2>/dev/null
TPS=(--file "$F72" --streams "$STREAMS" --prompt-len 512 --decode-tokens 32)
for r in "${RANKS[@]}"; do  # the largest first: a cold machine compiles its kernels there (hence 200 s)
  stage "orcd 72B TP $r"
  cap=120; [ "$r" = "$TOP" ] && cap=200
  run timeout "$(lim $cap 120)" python3 bench/tp/tp_scaling.py "${TPS[@]}" --ranks "$r" --modes tp-graphs \
    --out "$OUT/72b_tp$r" >"$OUT/72b_tp$r/bench.log" 2>&1
done
stage "wait for the llama.cpp build"
while [ ! -f "$W/build.rc" ] && [ "$(left)" -gt 80 ] && [ -z "${TP72_DRY:-}" ]; do sleep 2; done
echo "[build] $(cat "$W/build.rc" 2>/dev/null || echo 'not finished')" | tee -a "$OUT/stages.log"
tail -5 "$W/llama/build.log" >"$OUT/llama_build_tail.log" 2>/dev/null
stage "llama.cpp -sm layer,none,row"
if [ -f "$W/build.rc" ] || [ -n "${TP72_DRY:-}" ]; then
  T=$(lim 170 15)
  run timeout "$T" python3 bench/tp/llama_split.py measure --bin "$W/llama/build/bin" --file "$F72" \
    --modes layer,none,row --streams "$STREAMS" --out "$OUT/llama_split.json" --budget $((T - 5)) \
    >"$OUT/llama_split.log" 2>&1
fi
stage "orcd 72B TP $TOP, symmetric-memory all-reduce"
T=$(lim 130 10)
[ "$T" -gt 40 ] && run timeout "$T" python3 bench/tp/tp_scaling.py "${TPS[@]}" --ranks "$TOP" --modes tp-symm \
  --out "$OUT/72b_symm" >"$OUT/72b_symm/bench.log" 2>&1
stage "report"
run python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = [r for d in sorted(out.glob("72b_tp*")) if (d / "tp.json").exists()
        for r in json.loads((d / "tp.json").read_text())]
(out / "tp72.json").write_text(json.dumps(rows))
PY
run python3 bench/tp/llama_split.py report --tp "$OUT/tp72.json" --llama "$OUT/llama_split.json" --out "$OUT" \
  --model "qwen2.5-72b (synth, Q4_K_M)" --command "TP_RANKS=\"${RANKS[*]}\" bash bench/tp/tp72_run.sh" --commit "$COMMIT" \
  >"$OUT/report.log" 2>&1
echo "=== summary (${SECONDS} s)"
tail -7 "$OUT/ar/allreduce.log" 2>/dev/null
grep -hE "passed|failed|error" "$OUT/nccl_tests.log" 2>/dev/null | tail -2
cat "$OUT"/72b_*/tp.md "$OUT/peers_tp.md" 2>/dev/null | cut -c1-200 || echo "no tables (see the logs)"
if [ -z "${TP72_DRY:-}" ]; then
  tar -C "$OUT" -czf /tmp/tp72_all.tgz . && find "$OUT" -mindepth 1 -delete && mv /tmp/tp72_all.tgz "$OUT/"
fi
