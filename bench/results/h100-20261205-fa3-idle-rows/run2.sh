#!/usr/bin/env bash
# The second device call (trees made beforehand, carried: .ab/base, .ab/idle3):
#   bash scripts/ab_trees.sh .ab base idle3=bench/results/h100-20261205-fa3-idle-rows/idle3.patch
#   then on the GPU machine: bash bench/results/h100-20261205-fa3-idle-rows/run2.sh $OUT
# The fa3 sweep A/B of base and idle3 (three passes, cuDNN once) with the fa3 GPU tests on idle3 (built with
# the mbarrier watchdog), then the partial-tile tests repeated on that build while time allows.
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-HEAD of the day}; idle3 = base + idle3.patch" \
  FA3_AB_TESTS=idle3 FA3_AB_WATCHDOG=1 FA3_AB_PASSES=3 timeout ${AB_LIMIT:-420} bash scripts/fa3_ab.sh $OUT base=.ab/base idle3=.ab/idle3 \
  > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "tests:|FAILED|spill stores" $OUT/ab.log | grep -v " 0 bytes spill" | tail -n 6
tail -n 42 $OUT/ab-run.log
left=$(( ${LIMIT:-500} - ($(date +%s) - t0) ))
if [ $left -gt 30 ]; then
  timeout $(( left - 10 )) .ab/idle3/build-wd/tests/flashattn_tests_gpu --gtest_repeat=10 \
    --gtest_filter='Fa3Forward.SmallShapes:Fa3Forward.HeadDim64TileRowsByShape:Fa3Forward.TileChangesAcrossManyTilesPerCta' \
    > $OUT/idle3-repeat.log 2>&1
  echo "idle3 repeats rc $? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED" $OUT/idle3-repeat.log
fi
