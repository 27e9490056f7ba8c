#!/usr/bin/env bash
# Prepared call (~450 s): cross-tile.patch against the commit it is made on, and, where the tree is there, the
# transition timeline of ../h100-20261206-fa3-tile-transitions/ in the same call. Trees made beforehand and
# carried (.ab):
#   AB_COMMIT=e8ed33b bash scripts/ab_trees.sh .ab base cross=bench/results/h100-20261206-fa3-cross-tile/cross-tile.patch \
#     tl=bench/results/h100-20261206-fa3-tile-transitions/timeline-transitions.patch
# then on the GPU machine: bash bench/results/h100-20261206-fa3-cross-tile/run.sh $OUT
# Writes gpu.txt, console (stdout), probe.txt, timeline-summary.txt and logs.tar.gz into $OUT.
set -uo pipefail
OUT=$1
t0=$(date +%s)
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
trees=(.ab/base .ab/cross)
bash scripts/ab_build.sh $OUT/logs "flashattn_cli flashattn_tests_gpu" "${trees[@]}"
[ -d .ab/tl ] && bash scripts/ab_build.sh $OUT/logs flashattn_cli .ab/tl
T=.ab/cross/build-ab/tests/flashattn_tests_gpu
timeout 200 $T --gtest_filter='Fa3*:*/fa3' >$OUT/logs/tests-cross.log 2>&1
echo "tests cross rc $? after $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/logs/tests-cross.log | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' $OUT/logs/tests-cross.log | head -20
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 86 $T --gtest_filter='Fa3Forward.SmallShapes' \
  >$OUT/logs/racecheck-cross.log 2>&1
echo "racecheck rc $? after $(( $(date +%s) - t0 )) s: $(grep -E 'SUMMARY' $OUT/logs/racecheck-cross.log)"
if [ -x .ab/tl/build-ab/flashattn ]; then
  for n in 1024 2048 8192; do
    FA3_TIMELINE_DIMS="128" FA3_TIMELINE_SEQLEN=$n bash scripts/fa3_timeline.sh $OUT/logs/tl-n$n tl=.ab/tl >/dev/null
  done
  { for n in 1024 2048 8192; do echo "== N $n"; cat $OUT/logs/tl-n$n/timeline-summary.txt; done; } >$OUT/timeline-summary.txt
  echo "timeline done after $(( $(date +%s) - t0 )) s"
fi
FA3_AB_COMMIT='base = e8ed33b; cross = e8ed33b + cross-tile.patch' \
  FA3_PROBE_SHAPES="128:512:full 128:1024:full 128:2048:full 128:8192:full 128:1024:causal 64:1024:causal 64:512:causal" \
  FA3_PROBE_ROUNDS=${ROUNDS:-6} FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-550} )) \
  bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base cross=.ab/cross
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
