#!/usr/bin/env bash
# The GPU test suite on a lent CUDA machine within a time budget: the tests marked gpu in parallel
# (pytest-xdist, one process per test file), then those marked gpu_exclusive alone (they read whole-device
# state). Every result line names its test as it comes (-v), so a run cut by its time limit still says
# which test failed; the summary lists failures and errors (-rfE).
#   usage: OUT=DIR bash scripts/gpu_tests.sh [WORKERS] [SECONDS]     (defaults 12 workers, 480 s)
#   logs: $OUT/gpu_tests_parallel.txt, $OUT/gpu_tests_exclusive.txt; a line per failure: grep -E "FAILED|ERROR"
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
WORKERS=${1:-12}
SECONDS_LEFT=${2:-480}
mkdir -p "$OUT"
start=$(date +%s)
timeout $((SECONDS_LEFT - 60)) python3 -m pytest -v -rfE -m "gpu and not gpu_exclusive" tests -n "$WORKERS" --continue-on-collection-errors --durations=30 \
  --dist loadfile -p no:cacheprovider > "$OUT/gpu_tests_parallel.txt" 2>&1
rc=$?
left=$((SECONDS_LEFT - ($(date +%s) - start)))
timeout $((left > 10 ? left : 10)) python3 -m pytest -v -rfE -m "gpu_exclusive" tests --continue-on-collection-errors -p no:cacheprovider \
  > "$OUT/gpu_tests_exclusive.txt" 2>&1
rc2=$?
grep -hE "(FAILED|ERROR) tests" "$OUT"/gpu_tests_*.txt | sort -u | head -40
tail -n 1 "$OUT/gpu_tests_parallel.txt" "$OUT/gpu_tests_exclusive.txt"
[ "$rc" = 124 ] && echo "the parallel part was cut by its time limit"
exit $((rc != 0 ? rc : rc2))
