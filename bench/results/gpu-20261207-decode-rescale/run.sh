#!/usr/bin/env bash
# Prepared call (meant for an H200): the decode kernels' conditional rescale (rescale.patch) and the Q operand
# in registers (../h100-20261207-decode-qreg/qreg.patch) against the shipped kernels, every tree with the new
# rising-scores test (test.patch). Trees made beforehand and carried (.ab/dbase, .ab/qreg, .ab/rescale):
#   D=bench/results/gpu-20261207-decode-rescale Q=bench/results/h100-20261207-decode-qreg/qreg.patch
#   AB_COMMIT=2a8f1a9 bash scripts/ab_trees.sh .ab dbase=$D/test.patch qreg=$D/test.patch+$Q \
#     rescale=$D/test.patch+$D/rescale.patch
#   then on the GPU machine: bash bench/results/gpu-20261207-decode-rescale/run.sh $OUT
# Builds the three trees (CLI and GPU tests), runs the decode GPU tests on dbase and rescale, rotating rounds
# of KV-cache calls (trusted indices, scripts/decode_probe.sh) until LIMIT s after the start (default 400),
# then memcheck and racecheck of the new test on rescale (up to 180 s more; timeout_s 590).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-400}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT "flashattn_cli flashattn_tests_gpu" .ab/dbase .ab/qreg .ab/rescale
filter='*Decode*:*KvCache*:*KVCache*'
timeout 100 .ab/dbase/build-ab/tests/flashattn_tests_gpu --gtest_filter="$filter" >$OUT/tests-dbase.log 2>&1
echo "tests dbase rc $?: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/tests-dbase.log | tr '\n' ' ')" | tee $OUT/checks.txt
grep -E '^\[  FAILED  \]' $OUT/tests-dbase.log | tee -a $OUT/checks.txt
timeout 100 .ab/rescale/build-ab/tests/flashattn_tests_gpu --gtest_filter="$filter" >$OUT/tests-rescale.log 2>&1
echo "tests rescale rc $?: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/tests-rescale.log | tr '\n' ' ')" |
  tee -a $OUT/checks.txt
grep -E '^\[  FAILED  \]' $OUT/tests-rescale.log | tee -a $OUT/checks.txt
cases="1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072"
cases+=";16x8192|--batch 16 --cache-len 8192;64x4096|--batch 64 --cache-len 4096"
cases+=";d64-16x8192|--batch 16 --cache-len 8192 --head-dim 64"
DECODE_PROBE_CASES=$cases DECODE_PROBE_UNTIL=$(( t0 + LIMIT )) \
  bash scripts/decode_probe.sh $OUT dbase=.ab/dbase qreg=.ab/qreg rescale=.ab/rescale
# The sanitizers last (up to 90 s each), on the new test in the rescale tree.
for tool in memcheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 86 .ab/rescale/build-ab/tests/flashattn_tests_gpu \
    --gtest_filter=DecodeGpuKernels.ScoresRisingAlongTheCache >$OUT/$tool-rescale.log 2>&1
  echo "$tool rescale rc $?: $(grep -E 'SUMMARY' $OUT/$tool-rescale.log)" | tee -a $OUT/checks.txt
done
# At most 8 files come back: gpu.txt, checks.txt, probe.txt and the rest in logs.tar.gz.
(cd $OUT && tar -czf logs.tar.gz build-*.log tests-*.log memcheck-*.log racecheck-*.log probe.jsonl &&
  rm -f build-*.log tests-*.log memcheck-*.log racecheck-*.log probe.jsonl)
echo "done at $(( $(date +%s) - t0 )) s"
