#!/usr/bin/env bash
# Prepared call: the decode kernels with the warp's Q operand held in registers up to head dim 128
# (qreg.patch) against the shipped kernels. Trees made beforehand and carried (.ab/dbase, .ab/qreg):
#   D=bench/results/h100-20261207-decode-qreg
#   AB_COMMIT=69f8ef1 bash scripts/ab_trees.sh .ab dbase qreg=$D/qreg.patch
#   then on the GPU machine: bash bench/results/h100-20261207-decode-qreg/run.sh $OUT
# Builds both trees' CLIs and the qreg tree's GPU tests (sm_90a; scripts/ab_build.sh), runs the decode GPU tests
# on the qreg tree, then times KV-cache calls (trusted indices) in rotating rounds (scripts/decode_probe.sh),
# LIMIT s in all (default 480).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-480}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT flashattn_cli .ab/dbase &
bash scripts/ab_build.sh $OUT/qreg "flashattn_cli flashattn_tests_gpu" .ab/qreg
wait
mv $OUT/qreg/build-qreg.log $OUT/ && rmdir $OUT/qreg
timeout 150 .ab/qreg/build-ab/tests/flashattn_tests_gpu --gtest_filter='*Decode*:*KvCache*:*KVCache*' \
  > $OUT/tests-qreg.log 2>&1
echo "tests qreg rc $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests-qreg.log | tr '\n' ' ')"
DECODE_PROBE_CASES="1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072;16x8192|--batch 16 --cache-len 8192;64x4096|--batch 64 --cache-len 4096;d64-16x8192|--batch 16 --cache-len 8192 --head-dim 64" \
  DECODE_PROBE_UNTIL=$(( t0 + LIMIT )) bash scripts/decode_probe.sh $OUT dbase=.ab/dbase qreg=.ab/qreg
for t in dbase qreg; do gzip -9 $OUT/build-$t.log; done
echo "done at $(( $(date +%s) - t0 )) s"
