#!/usr/bin/env bash
# One device call (trees made beforehand and carried: .ab/base, .ab/half, .ab/gemm):
#   bash scripts/ab_trees.sh .ab base half=bench/results/h100-20261205-fa3-half-mask/half-mask.patch \
#     gemm=bench/results/h100-20261205-fa3-half-mask/half-gemm.patch
#   then on the GPU machine: AB_BASE=<sha> bash bench/results/h100-20261205-fa3-half-mask/run.sh $OUT
# The fa3 sweep A/B (two passes, no peer), the fa3 GPU tests on gemm (mbarrier watchdog; gemm holds every
# change of half), then rounds of the short causal probe (scripts/fa3_probe.sh) while time is left (LIMIT
# seconds in all, default 450).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-450}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-HEAD of the day}; half = base + half-mask.patch; gemm = base + half-gemm.patch" \
  FA3_AB_PEERS=0 FA3_AB_TESTS=gemm FA3_AB_WATCHDOG=1 FA3_AB_PASSES=2 timeout $(( LIMIT - 60 )) \
  bash scripts/fa3_ab.sh $OUT base=.ab/base half=.ab/half gemm=.ab/gemm > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "kernel builds|after its P V wait|tests:|FAILED" $OUT/ab.log | tail -n 10
tail -n 45 $OUT/ab-run.log
FA3_PROBE_ROUNDS=8 FA3_PROBE_SHAPES="64:512:causal 64:1024:causal 128:512:causal 128:1024:causal" \
  FA3_PROBE_UNTIL=$(( t0 + LIMIT )) bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base half=.ab/half gemm=.ab/gemm
echo "probe done at $(( $(date +%s) - t0 )) s"
