#!/usr/bin/env bash
# Second call: grants.patch + grants2.patch (each tile's counter on its own 128-byte line) against the shipped
# kernels. Trees made beforehand and carried (.ab/dbase, .ab/grants2):
#   D=bench/results/h100-20261207-decode-grants
#   AB_COMMIT=eb57be1 bash scripts/ab_trees.sh .ab dbase grants2=$D/grants.patch+$D/grants2.patch
#   then on the GPU machine: LIMIT=390 bash bench/results/h100-20261207-decode-grants/run2.sh $OUT
# Builds, the decode GPU tests on the grants2 tree, then rotating rounds of five shapes until LIMIT s.
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-390}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT flashattn_cli .ab/dbase &
bash scripts/ab_build.sh $OUT/g2 "flashattn_cli flashattn_tests_gpu" .ab/grants2
wait
mv $OUT/g2/build-grants2.log $OUT/ && rmdir $OUT/g2
timeout 120 .ab/grants2/build-ab/tests/flashattn_tests_gpu --gtest_filter='*Decode*:*KvCache*:*KVCache*' \
  > $OUT/tests-grants2.log 2>&1
echo "tests grants2 rc $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests-grants2.log | tr '\n' ' ')"
grep -E '^\[  FAILED' $OUT/tests-grants2.log | head -5
DECODE_PROBE_CASES="1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072;4x8192|--batch 4 --cache-len 8192;1x32768-paged16|--batch 1 --cache-len 32768 --page-size 16;16x8192|--batch 16 --cache-len 8192" \
  DECODE_PROBE_UNTIL=$(( t0 + LIMIT )) bash scripts/decode_probe.sh $OUT dbase=.ab/dbase grants2=.ab/grants2
for t in dbase grants2; do gzip -9 $OUT/build-$t.log; done
echo "done at $(( $(date +%s) - t0 )) s"
