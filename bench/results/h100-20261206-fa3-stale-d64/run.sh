#!/usr/bin/env bash
# Prepared call (~500 s): 646ff54 (the stored-max softmax on the three-consumer head-dim-64 kernels, its slow
# path after the P V wait) against ba0924a. Trees made beforehand and carried (.ab):
#   AB_COMMIT=ba0924a bash scripts/ab_trees.sh .ab base && AB_COMMIT=646ff54 bash scripts/ab_trees.sh .ab new
# then on the GPU machine: bash bench/results/h100-20261206-fa3-stale-d64/run.sh $OUT
# Builds both (CLI and GPU tests, sm_90a), runs every fa3 GPU test on new, racecheck and memcheck of the
# rising-score cases on new, then scripts/fa3_probe.sh rounds, the trees alternating.
set -uo pipefail
OUT=$1
t0=$(date +%s)
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT/logs "flashattn_cli flashattn_tests_gpu" .ab/base .ab/new
T=.ab/new/build-ab/tests/flashattn_tests_gpu
timeout 200 $T --gtest_filter='Fa3*:*/fa3' >$OUT/logs/tests-new.log 2>&1
echo "tests new rc $? after $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/logs/tests-new.log | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' $OUT/logs/tests-new.log | head -20
for tool in racecheck memcheck; do
  timeout 75 compute-sanitizer --tool $tool --error-exitcode 86 $T \
    --gtest_filter='Fa3Forward.ScoresRisingPastTheStoredMax' >$OUT/logs/$tool-new.log 2>&1
  echo "$tool rc $? after $(( $(date +%s) - t0 )) s: $(grep -E 'SUMMARY|PASSED|FAILED' $OUT/logs/$tool-new.log | tr '\n' ' ')"
done
FA3_AB_COMMIT='base = ba0924a; new = 646ff54' \
  FA3_PROBE_SHAPES="64:8192:full 64:2048:full 64:8192:causal 64:1024:causal 128:8192:full 128:8192:causal" \
  FA3_PROBE_ROUNDS=${ROUNDS:-6} FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-540} )) \
  bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base new=.ab/new
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
