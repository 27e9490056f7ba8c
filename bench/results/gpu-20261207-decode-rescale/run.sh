#!/usr/bin/env bash
# Prepared call (meant for an H200): the decode kernels' conditional rescale (rescale.patch) and the Q operand
# in registers (../h100-20261207-decode-qreg/qreg.patch) against the shipped kernels, every tree with the new
# rising-scores test (test.patch). Trees made beforehand and carried (.ab/dbase, .ab/qreg, .ab/rescale):
#   D=bench/results/gpu-20261207-decode-rescale Q=bench/results/h100-20261207-decode-qreg/qreg.patch
#   AB_COMMIT=2a8f1a9 bash scripts/ab_trees.sh .ab dbase=$D/test.patch qreg=$D/test.patch+$Q \
#     rescale=$D/test.patch+$D/rescale.patch
#   then on the GPU machine: bash bench/results/gpu-20261207-decode-rescale/run.sh $OUT
# Builds the three trees (CLI and GPU tests), runs the decode GPU tests on dbase and rescale (memcheck and
# racecheck of the new test on rescale), then rotating rounds of KV-cache calls (trusted indices,
# scripts/decode_probe.sh) until LIMIT s after the start (default 480).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-480}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT "flashattn_cli flashattn_tests_gpu" .ab/dbase .ab/qreg .ab/rescale
export CHECK_TESTS='*Decode*:*KvCache*:*KVCache*' CHECK_SANITIZE=DecodeGpuKernels.ScoresRisingAlongTheCache
for t in dbase rescale; do
  bash scripts/tree_gpu_checks.sh .ab/$t/build-ab/tests/flashattn_tests_gpu $OUT $OUT/checks.txt $t "-$t"
done
cases="1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072"
cases+=";16x8192|--batch 16 --cache-len 8192;64x4096|--batch 64 --cache-len 4096"
cases+=";d64-16x8192|--batch 16 --cache-len 8192 --head-dim 64"
DECODE_PROBE_CASES=$cases DECODE_PROBE_UNTIL=$(( t0 + LIMIT )) \
  bash scripts/decode_probe.sh $OUT dbase=.ab/dbase qreg=.ab/qreg rescale=.ab/rescale
for t in dbase qreg rescale; do gzip -9 $OUT/build-$t.log; done
echo "done at $(( $(date +%s) - t0 )) s"
