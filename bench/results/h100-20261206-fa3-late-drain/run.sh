#!/usr/bin/env bash
# Prepared call (~250 s): late-drain.patch against its commit, fa3 GPU tests and racecheck on it, then
# scripts/fa3_probe.sh rounds until LIMIT. Trees made beforehand and carried (.ab):
#   bash scripts/ab_trees.sh .ab base late=bench/results/h100-20261206-fa3-late-drain/late-drain.patch
# then on the GPU machine: bash bench/results/h100-20261206-fa3-late-drain/run.sh $OUT
# Writes gpu.txt, probe.txt and logs.tar.gz into $OUT.
set -uo pipefail
OUT=$1
t0=$(date +%s)
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT/logs "flashattn_cli flashattn_tests_gpu" .ab/late &
bash scripts/ab_build.sh $OUT/logs flashattn_cli .ab/base
wait
T=.ab/late/build-ab/tests/flashattn_tests_gpu
timeout 120 $T --gtest_filter='Fa3*:*/fa3' >$OUT/logs/tests-late.log 2>&1
echo "tests late rc $? after $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/logs/tests-late.log | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' $OUT/logs/tests-late.log | head -20
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 86 $T --gtest_filter='Fa3Forward.SmallShapes' \
  >$OUT/logs/racecheck-late.log 2>&1
echo "racecheck rc $? after $(( $(date +%s) - t0 )) s: $(grep -E 'SUMMARY' $OUT/logs/racecheck-late.log)"
FA3_AB_COMMIT="base = ${AB_BASE:-see index.json}; late = base + late-drain.patch" \
  FA3_PROBE_SHAPES="128:512:full 128:1024:full 128:1024:causal 64:1024:causal 128:8192:full" \
  FA3_PROBE_ROUNDS=${ROUNDS:-6} FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-250} )) \
  bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base late=.ab/late
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
