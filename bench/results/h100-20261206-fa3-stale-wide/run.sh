#!/usr/bin/env bash
# Prepared call (~400 s): the stored-max softmax on every kernel with intra-warpgroup overlap (stale-wide.patch)
# against the commit it is made on. Trees made beforehand and carried (.ab):
#   AB_COMMIT=a02ae44 bash scripts/ab_trees.sh .ab base wide=bench/results/h100-20261206-fa3-stale-wide/stale-wide.patch
# then on the GPU machine: bash bench/results/h100-20261206-fa3-stale-wide/run.sh $OUT
# Builds both (CLI and GPU tests, sm_90a), runs every fa3 GPU test on wide (ScoresRisingPastTheStoredMax has a
# three-consumer head-dim-64 case), then scripts/fa3_probe.sh rounds, the trees alternating.
set -uo pipefail
OUT=$1
t0=$(date +%s)
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT/logs "flashattn_cli flashattn_tests_gpu" .ab/base .ab/wide
timeout 200 .ab/wide/build-ab/tests/flashattn_tests_gpu --gtest_filter='Fa3*:*/fa3' >$OUT/logs/tests-wide.log 2>&1
echo "tests wide rc $? after $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/logs/tests-wide.log | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' $OUT/logs/tests-wide.log | head -20
FA3_AB_COMMIT='base = a02ae44; wide = a02ae44 + stale-wide.patch' \
  FA3_PROBE_SHAPES="64:8192:full 64:2048:full 64:8192:causal 256:8192:full 128:8192:full" \
  FA3_PROBE_ROUNDS=${ROUNDS:-6} FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-540} )) \
  bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base wide=.ab/wide
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
