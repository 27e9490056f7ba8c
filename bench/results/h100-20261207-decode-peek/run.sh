#!/usr/bin/env bash
# Prepared call: the decode split merge with a peek at the tile's ticket (peek.patch), and the same with head
# dim 128 always on the 4-warp kernel (nowide.patch), against the shipped kernels. Trees made beforehand and
# carried (.ab/dbase, .ab/peek, .ab/peeknowide):
#   D=bench/results/h100-20261207-decode-peek
#   AB_COMMIT=<commit> bash scripts/ab_trees.sh .ab dbase peek=$D/peek.patch peeknowide=$D/peek.patch+$D/nowide.patch
#   then on the GPU machine: bash bench/results/h100-20261207-decode-peek/run.sh $OUT
# Builds the three trees' CLIs and the peek tree's GPU tests (sm_90a; scripts/ab_build.sh), runs the decode GPU
# tests on the peek tree, then times KV-cache calls (trusted indices) in rotating rounds (scripts/decode_probe.sh),
# LIMIT s in all (default 540).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT flashattn_cli .ab/dbase .ab/peeknowide &
bash scripts/ab_build.sh $OUT/peek "flashattn_cli flashattn_tests_gpu" .ab/peek
wait
mv $OUT/peek/build-peek.log $OUT/ && rmdir $OUT/peek
timeout 150 .ab/peek/build-ab/tests/flashattn_tests_gpu --gtest_filter='*Decode*:*KvCache*:*KVCache*' \
  > $OUT/tests-peek.log 2>&1
echo "tests peek rc $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests-peek.log | tr '\n' ' ')"
DECODE_PROBE_CASES="1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072;4x8192|--batch 4 --cache-len 8192;16x8192|--batch 16 --cache-len 8192;64x4096|--batch 64 --cache-len 4096" \
  DECODE_PROBE_UNTIL=$(( t0 + LIMIT )) bash scripts/decode_probe.sh $OUT dbase=.ab/dbase peek=.ab/peek \
  peeknowide=.ab/peeknowide
for t in dbase peek peeknowide; do gzip -9 $OUT/build-$t.log; done
echo "done at $(( $(date +%s) - t0 )) s"
