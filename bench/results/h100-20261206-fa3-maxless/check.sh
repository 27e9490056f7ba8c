#!/usr/bin/env bash
# Second device call (short: what the device time left allows): the commit that adopts the change, built
# once (GPU tests, sm_90a); compute-sanitizer racecheck and memcheck on Fa3Forward.SmallShapes (the K stage
# and the Q buffer now take one arrival per consumer warp), then the whole GPU test binary until the limit.
# Usage on the GPU machine: bash bench/results/h100-20261206-fa3-maxless/check.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B build-check -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHITECTURES=90a \
  >$OUT/build.log 2>&1 && cmake --build build-check -j "$(nproc)" --target flashattn_tests_gpu >>$OUT/build.log 2>&1
echo "build rc $? after $(( $(date +%s) - t0 )) s"
T=build-check/tests/flashattn_tests_gpu
for tool in racecheck memcheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 86 $T --gtest_filter=Fa3Forward.SmallShapes >$OUT/$tool.log 2>&1
  echo "$tool rc $? after $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | tail -1)"
done
left=$(( ${LIMIT:-175} - ($(date +%s) - t0) ))
timeout $left $T >$OUT/tests.log 2>&1
echo "all GPU tests rc $? after $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' $OUT/tests.log | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' $OUT/tests.log | head
grep -c '^\[       OK \]' $OUT/tests.log
