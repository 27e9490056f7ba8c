#!/usr/bin/env bash
# Device call (~450 s): the fa3 main-loop softmax against the stored row max (maxless.patch) against the
# commit before it. Trees made beforehand and carried (.ab):
#   AB_COMMIT=26d8995 bash scripts/ab_trees.sh .ab base maxless=bench/results/h100-20261206-fa3-maxless/maxless.patch
# then on the GPU machine: bash bench/results/h100-20261206-fa3-maxless/run.sh $OUT
# Builds both (CLI and GPU tests, sm_90a), runs every fa3 GPU test on maxless and the rising-scores test on
# base, then scripts/fa3_probe.sh rounds on five shapes, the trees alternating.
set -uo pipefail
OUT=$1
t0=$(date +%s)
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT/logs "flashattn_cli flashattn_tests_gpu" .ab/base .ab/maxless
for t in maxless base; do
  filter='Fa3*:*/fa3'
  [ $t = base ] && filter='Fa3Forward.ScoresRisingPastTheStoredMax'
  timeout 200 .ab/$t/build-ab/tests/flashattn_tests_gpu --gtest_filter="$filter" >$OUT/logs/tests-$t.log 2>&1
  echo "tests $t rc $? after $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/logs/tests-$t.log | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' $OUT/logs/tests-$t.log | head -20
done
FA3_AB_COMMIT='base = 26d8995; maxless = 26d8995 + maxless.patch (fa030f0)' \
  FA3_PROBE_SHAPES="128:8192:full 128:2048:full 128:8192:causal 128:1024:full 64:1024:causal" \
  FA3_PROBE_ROUNDS=${ROUNDS:-6} FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-540} )) \
  bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base maxless=.ab/maxless
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
