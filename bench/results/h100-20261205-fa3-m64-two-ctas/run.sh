#!/usr/bin/env bash
# One device call (trees made beforehand and carried: .ab/base, .ab/m64):
#   bash scripts/ab_trees.sh .ab base m64=bench/results/h100-20261205-fa3-m64-two-ctas/m64-two-ctas.patch
#   then on the GPU machine: AB_BASE=<sha> bash bench/results/h100-20261205-fa3-m64-two-ctas/run.sh $OUT
# The fa3 sweep A/B with cuDNN (two passes), the fa3 GPU tests on m64 (mbarrier watchdog), then rounds of
# the short head-dim-64 probe (scripts/fa3_probe.sh) while time is left (LIMIT seconds in all, default 450).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-450}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-HEAD of the day}; m64 = base + m64-two-ctas.patch" \
  FA3_AB_PEERS=1 FA3_AB_TESTS=m64 FA3_AB_WATCHDOG=1 FA3_AB_PASSES=2 timeout $(( LIMIT - 90 )) \
  bash scripts/fa3_ab.sh $OUT base=.ab/base m64=.ab/m64 > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "kernel builds|after its P V wait|tests:|FAILED" $OUT/ab.log | tail -n 10
tail -n 45 $OUT/ab-run.log
FA3_PROBE_ROUNDS=10 FA3_PROBE_SHAPES="64:512:causal 64:1024:causal 64:512:full 64:1024:full" \
  FA3_PROBE_UNTIL=$(( t0 + LIMIT )) bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base m64=.ab/m64
echo "probe done at $(( $(date +%s) - t0 )) s"
