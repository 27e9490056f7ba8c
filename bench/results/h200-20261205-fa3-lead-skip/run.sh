#!/usr/bin/env bash
# The device call (trees made beforehand, carried: .ab/base, .ab/lead):
#   bash scripts/ab_trees.sh .ab base lead=bench/results/h200-20261205-fa3-lead-skip/lead-skip.patch
#   then on the GPU machine: bash bench/results/h200-20261205-fa3-lead-skip/run.sh $OUT
# The fa3 sweep A/B of base and lead (three passes, cuDNN once) with the fa3 GPU tests on lead (built with
# the mbarrier watchdog, the new Fa3Forward.MaskedLeadBlocksPerWarpgroup among them), then the masked and
# partial-tile tests repeated on that build while time allows.
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-HEAD of the day}; lead = base + lead-skip.patch" \
  FA3_AB_TESTS=lead FA3_AB_WATCHDOG=1 FA3_AB_PASSES=3 timeout ${AB_LIMIT:-400} bash scripts/fa3_ab.sh $OUT base=.ab/base lead=.ab/lead \
  > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "tests:|FAILED|spill stores" $OUT/ab.log | grep -v " 0 bytes spill" | tail -n 6
tail -n 42 $OUT/ab-run.log
left=$(( ${LIMIT:-455} - ($(date +%s) - t0) ))
if [ $left -gt 30 ]; then
  timeout $(( left - 10 )) .ab/lead/build-wd/tests/flashattn_tests_gpu --gtest_repeat=10 \
    --gtest_filter='Fa3Forward.MaskedLeadBlocksPerWarpgroup:Fa3Forward.SmallShapes:Fa3Forward.HeadDim64TileRowsByShape:Fa3Forward.TileChangesAcrossManyTilesPerCta' \
    > $OUT/lead-repeat.log 2>&1
  echo "lead repeats rc $? at $(( $(date +%s) - t0 )) s"; grep -cE "^\[  PASSED" $OUT/lead-repeat.log
fi
