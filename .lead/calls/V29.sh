# one H200: the whole GPU suite at the session's commit (3301041: orcd/ as at ea855e6)
. .lead/calls/common.sh
OUT=$R timeout 575 bash scripts/gpu_tests.sh 14 560 > $R/summary.txt 2>&1
echo "rc $?" >> $R/summary.txt
cat $R/summary.txt | tail -30
grep -E "passed|failed" $R/gpu_tests_parallel.txt | tail -3
finish
