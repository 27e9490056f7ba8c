#!/usr/bin/env bash
# Prepared call (~560 s): ewait.patch against its commit, two timing-only bounds on top of it (nostore,
# noepi), and the gap stamps on the tile-transition timeline. Trees made beforehand and carried (.ab):
#   bash scripts/ab_trees.sh .ab base ewait=bench/results/h100-20261206-fa3-epilogue/ewait.patch \
#     nostore=bench/results/h100-20261206-fa3-epilogue/ewait.patch+bench/results/h100-20261206-fa3-epilogue/nostore.patch \
#     noepi=bench/results/h100-20261206-fa3-epilogue/ewait.patch+bench/results/h100-20261206-fa3-epilogue/noepi.patch
#   AB_COMMIT=e8ed33b bash scripts/ab_trees.sh .ab \
#     tl2=bench/results/h100-20261206-fa3-tile-transitions/timeline-transitions.patch+bench/results/h100-20261206-fa3-epilogue/gap-stamps.patch
# then on the GPU machine: bash bench/results/h100-20261206-fa3-epilogue/run.sh $OUT
# Writes gpu.txt, probe.txt, timeline.txt and logs.tar.gz into $OUT.
set -uo pipefail
OUT=$1
t0=$(date +%s)
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT/logs "flashattn_cli flashattn_tests_gpu" .ab/ewait &
bash scripts/ab_build.sh $OUT/logs flashattn_cli .ab/base .ab/nostore .ab/noepi .ab/tl2
wait
T=.ab/ewait/build-ab/tests/flashattn_tests_gpu
timeout 200 $T --gtest_filter='Fa3*:*/fa3' >$OUT/logs/tests-ewait.log 2>&1
echo "tests ewait rc $? after $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/logs/tests-ewait.log | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' $OUT/logs/tests-ewait.log | head -20
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 86 $T --gtest_filter='Fa3Forward.SmallShapes' \
  >$OUT/logs/racecheck-ewait.log 2>&1
echo "racecheck rc $? after $(( $(date +%s) - t0 )) s: $(grep -E 'SUMMARY' $OUT/logs/racecheck-ewait.log)"
for n in 1024 2048; do
  FA3_TIMELINE_DIMS="128" FA3_TIMELINE_SEQLEN=$n bash scripts/fa3_timeline.sh $OUT/logs/tl-n$n tl2=.ab/tl2 >/dev/null
done
{ for n in 1024 2048; do echo "== N $n"; cat $OUT/logs/tl-n$n/timeline-summary.txt; grep -E "^t[tg] " $OUT/logs/tl-n$n/timeline.txt; done; } >$OUT/timeline.txt
echo "timeline done after $(( $(date +%s) - t0 )) s"
FA3_AB_COMMIT='base = 634c88d; ewait = 634c88d + ewait.patch; nostore = + nostore.patch on ewait; noepi = + noepi.patch on ewait' \
  FA3_PROBE_SHAPES="128:1024:causal 64:1024:causal 128:2048:causal 128:512:full 128:1024:full 128:8192:full" \
  FA3_PROBE_ROUNDS=${ROUNDS:-5} FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-560} )) \
  bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base ewait=.ab/ewait nostore=.ab/nostore noepi=.ab/noepi
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
