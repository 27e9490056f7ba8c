#!/usr/bin/env bash
# Prepared call: decode blocks handed out by a per-tile counter past each split's first steps (grants.patch)
# against the shipped kernels. Trees made beforehand and carried (.ab/dbase, .ab/grants):
#   D=bench/results/h100-20261207-decode-grants
#   AB_COMMIT=eb57be1 bash scripts/ab_trees.sh .ab dbase grants=$D/grants.patch
#   then on the GPU machine: bash bench/results/h100-20261207-decode-grants/run.sh $OUT
# Builds both trees' CLIs and the grants tree's GPU tests (sm_90a; scripts/ab_build.sh), runs the decode GPU
# tests on the grants tree, memcheck and racecheck of one split test there, then times KV-cache calls
# (trusted indices) in rotating rounds (scripts/decode_probe.sh), LIMIT s in all (default 480).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-480}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT flashattn_cli .ab/dbase &
bash scripts/ab_build.sh $OUT/grants "flashattn_cli flashattn_tests_gpu" .ab/grants
wait
mv $OUT/grants/build-grants.log $OUT/ && rmdir $OUT/grants
T=.ab/grants/build-ab/tests/flashattn_tests_gpu
timeout 150 $T --gtest_filter='*Decode*:*KvCache*:*KVCache*' > $OUT/tests-grants.log 2>&1
echo "tests grants rc $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests-grants.log | tr '\n' ' ')"
grep -E '^\[  FAILED' $OUT/tests-grants.log | head -5
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 86 $T \
    --gtest_filter='DecodeGpuSplits.BackToBackCallsOnOneStreamReuseTheTickets' > $OUT/$tool-grants.log 2>&1
  echo "$tool rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool-grants.log | tr '\n' ' ')"
done
DECODE_PROBE_CASES="1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072;4x8192|--batch 4 --cache-len 8192;1x32768-paged16|--batch 1 --cache-len 32768 --page-size 16;16x8192|--batch 16 --cache-len 8192;64x4096|--batch 64 --cache-len 4096" \
  DECODE_PROBE_UNTIL=$(( t0 + LIMIT )) bash scripts/decode_probe.sh $OUT dbase=.ab/dbase grants=.ab/grants
for t in dbase grants; do gzip -9 $OUT/build-$t.log; done
echo "done at $(( $(date +%s) - t0 )) s"
