#!/usr/bin/env bash
# The device call for this folder (trees made beforehand, carried: .ab/base, .ab/split):
#   bash scripts/ab_trees.sh .ab base split=bench/results/h100-20261205-fa3-tail-split/tail-split.patch
#   then on the GPU machine: bash bench/results/h100-20261205-fa3-tail-split/run.sh $OUT
# The fa3 sweep A/B with the fa3 GPU tests on `split` (scripts/fa3_ab.sh), then the last-wave probe on both
# trees' builds (waves.sh).
set -uo pipefail
OUT=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-8a51168}; split = base + tail-split.patch" FA3_AB_TESTS=split FA3_AB_PASSES=2 \
  timeout ${AB_LIMIT:-400} bash scripts/fa3_ab.sh $OUT/ab base=.ab/base split=.ab/split > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "tests:|ptxas|spill|C7518" $OUT/ab/ab.log | tail -n 6
tail -n 40 $OUT/ab-run.log
timeout ${WAVES_LIMIT:-150} bash "$HERE/waves.sh" $OUT base=.ab/base/build-ab/flashattn split=.ab/split/build-ab/flashattn
echo "total $(( $(date +%s) - t0 )) s"
