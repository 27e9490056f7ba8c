#!/usr/bin/env bash
# Prepared call: the split merge's ticket with one fence or one acq_rel atomic in thread 0 after the barrier,
# instead of a sequentially consistent fence in every thread before it and after it. Trees made beforehand
# and carried (.ab/dbase, .ab/acqrel, .ab/onefence):
#   D=bench/results/h100-20261206-decode-ticket
#   AB_COMMIT=9a773ff bash scripts/ab_trees.sh .ab dbase acqrel=$D/ticket-acq-rel.patch onefence=$D/ticket-one-fence.patch
#   then on the GPU machine: bash bench/results/h100-20261206-decode-ticket/run.sh $OUT
# Builds the three trees' CLIs and GPU tests (sm_90a; scripts/ab_build.sh), runs the decode GPU tests on the two
# patched ones, then times KV-cache calls (trusted indices) in rotating rounds (scripts/decode_probe.sh), LIMIT s in
# all (default 330).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-330}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT "flashattn_cli flashattn_tests_gpu" .ab/dbase .ab/acqrel .ab/onefence
for t in acqrel onefence; do
  timeout 150 .ab/$t/build-ab/tests/flashattn_tests_gpu --gtest_filter='*DecodeGpu*:*KvCache*Gpu*' > $OUT/tests-$t.log 2>&1
  echo "tests $t rc $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests-$t.log | tr '\n' ' ')"
done
DECODE_PROBE_CASES="1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072;4x8192|--batch 4 --cache-len 8192;16x8192|--batch 16 --cache-len 8192;64x4096|--batch 64 --cache-len 4096" \
  DECODE_PROBE_UNTIL=$(( t0 + LIMIT )) bash scripts/decode_probe.sh $OUT dbase=.ab/dbase acqrel=.ab/acqrel onefence=.ab/onefence
for t in dbase acqrel onefence; do gzip -9 $OUT/build-$t.log; done
echo "done at $(( $(date +%s) - t0 )) s"
