#!/usr/bin/env bash
# The device call for this folder (trees made beforehand, carried: .ab/base, .ab/split16):
#   bash scripts/ab_trees.sh .ab base split16=bench/results/h100-20261205-fa3-tail-split16/tail-split16.patch
#   then on the GPU machine: bash bench/results/h100-20261205-fa3-tail-split16/run.sh $OUT
# The fa3 sweep A/B, three passes, with the fa3 GPU tests on split16 (about 350 s on an H100).
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-HEAD of the day}; split16 = base + tail-split16.patch" FA3_AB_TESTS=split16 \
  FA3_AB_PASSES=3 timeout ${AB_LIMIT:-560} bash scripts/fa3_ab.sh $OUT base=.ab/base split16=.ab/split16 \
  > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "tests:|FAILED|spill stores" $OUT/ab.log | grep -v " 0 bytes spill" | tail -n 6
tail -n 45 $OUT/ab-run.log
