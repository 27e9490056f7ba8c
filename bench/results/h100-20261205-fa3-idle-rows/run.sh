#!/usr/bin/env bash
# One device call for the two prepared fa3 changes (trees made beforehand, carried: .ab/base, .ab/split16, .ab/idle):
#   bash scripts/ab_trees.sh .ab base split16=bench/results/h100-20261205-fa3-tail-split16/tail-split16.patch \
#     idle=bench/results/h100-20261205-fa3-idle-rows/idle-rows.patch
#   then on the GPU machine: bash bench/results/h100-20261205-fa3-idle-rows/run.sh $OUT
# The fa3 sweep A/B of the three trees (two passes, cuDNN once) with the fa3 GPU tests on idle (built with the
# mbarrier watchdog), then the fa3 GPU tests of split16, then idle's partial-tile tests repeated (about 520 s
# on an H100; the split16 folder's run.sh measures the tail split alone, three passes).
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-HEAD of the day}; split16 = base + tail-split16.patch; idle = base + idle-rows.patch" \
  FA3_AB_TESTS=idle FA3_AB_WATCHDOG=1 FA3_AB_PASSES=2 timeout ${AB_LIMIT:-480} bash scripts/fa3_ab.sh $OUT base=.ab/base split16=.ab/split16 idle=.ab/idle \
  > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "tests:|FAILED|spill stores" $OUT/ab.log | grep -v " 0 bytes spill" | tail -n 6
tail -n 45 $OUT/ab-run.log
left=$(( ${LIMIT:-585} - ($(date +%s) - t0) ))
if [ $left -gt 60 ]; then
  (cmake --build .ab/split16/build-ab -j 16 --target flashattn_tests_gpu > $OUT/split16-tests.log 2>&1 &&
   timeout $(( left - 20 )) .ab/split16/build-ab/tests/flashattn_tests_gpu --gtest_filter='Fa3*:*GpuForward*fa3*' >> $OUT/split16-tests.log 2>&1)
  echo "split16 tests rc $? at $(( $(date +%s) - t0 )) s"; tail -n 3 $OUT/split16-tests.log
fi
# The partial-tile tests again on idle's watchdog build (a hang names its barrier), as long as time allows.
left=$(( ${LIMIT:-585} - ($(date +%s) - t0) ))
if [ $left -gt 30 ]; then
  timeout $(( left - 10 )) .ab/idle/build-wd/tests/flashattn_tests_gpu --gtest_repeat=10 \
    --gtest_filter='Fa3Forward.SmallShapes:Fa3Forward.HeadDim64TileRowsByShape:Fa3Forward.TileChangesAcrossManyTilesPerCta' \
    > $OUT/idle-repeat.log 2>&1
  echo "idle repeats rc $? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED" $OUT/idle-repeat.log
fi
