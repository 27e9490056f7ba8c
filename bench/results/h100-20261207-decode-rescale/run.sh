#!/usr/bin/env bash
# Device call (meant for an H200, ran on an H100): the decode kernels' conditional rescale (rescale.patch) and the Q operand
# in registers (../h100-20261207-decode-qreg/qreg.patch) against the shipped kernels, every tree with the new
# rising-scores test (test.patch). Trees made beforehand and carried (.ab/dbase, .ab/qreg, .ab/rescale):
#   D=bench/results/h100-20261207-decode-rescale Q=bench/results/h100-20261207-decode-qreg/qreg.patch
#   AB_COMMIT=2a8f1a9 bash scripts/ab_trees.sh .ab dbase=$D/test.patch qreg=$D/test.patch+$Q \
#     rescale=$D/test.patch+$D/rescale.patch
#   then on the GPU machine: bash bench/results/h100-20261207-decode-rescale/run.sh $OUT   (timeout_s 590)
# scripts/decode_ab_call.sh: the three trees built, the decode GPU tests on dbase and rescale, rotating rounds
# of KV-cache calls (trusted indices) for 400 s from the start, then memcheck and racecheck of the new test on
# rescale.
cases="1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072"
cases+=";16x8192|--batch 16 --cache-len 8192;64x4096|--batch 64 --cache-len 4096"
cases+=";d64-16x8192|--batch 16 --cache-len 8192 --head-dim 64"
DECODE_PROBE_CASES=$cases DECODE_AB_TESTED="dbase rescale" \
  DECODE_AB_SANITIZE="rescale DecodeGpuKernels.ScoresRisingAlongTheCache" \
  bash scripts/decode_ab_call.sh "$1" dbase=.ab/dbase qreg=.ab/qreg rescale=.ab/rescale
