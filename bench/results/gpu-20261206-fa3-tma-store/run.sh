#!/usr/bin/env bash
# Prepared call (~480 s): tma-store.patch against its commit: fa3 GPU tests, memcheck and racecheck on it,
# then scripts/fa3_probe.sh rounds until LIMIT. Trees made beforehand and carried (.ab):
#   bash scripts/ab_trees.sh .ab base tma=bench/results/gpu-20261206-fa3-tma-store/tma-store.patch
# then on the GPU machine: bash bench/results/gpu-20261206-fa3-tma-store/run.sh $OUT
# Writes gpu.txt, probe.txt, sass.txt and logs.tar.gz into $OUT.
set -uo pipefail
OUT=$1
t0=$(date +%s)
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT/logs "flashattn_cli flashattn_tests_gpu" .ab/tma &
bash scripts/ab_build.sh $OUT/logs flashattn_cli .ab/base
wait
T=.ab/tma/build-ab/tests/flashattn_tests_gpu
timeout 150 $T --gtest_filter='Fa3*:*/fa3' >$OUT/logs/tests-tma.log 2>&1
echo "tests tma rc $? after $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/logs/tests-tma.log | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' $OUT/logs/tests-tma.log | head -20
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 86 $T --gtest_filter='Fa3Forward.SmallShapes' \
    >$OUT/logs/$tool-tma.log 2>&1
  echo "$tool rc $? after $(( $(date +%s) - t0 )) s: $(grep -E 'SUMMARY' $OUT/logs/$tool-tma.log)"
done
{ for t in base tma; do
    echo "== $t"
    cuobjdump -sass .ab/$t/build-ab/CMakeFiles/flashattn.dir/src/cuda/sm90/fa3_fwd_hd*.cu.o >$OUT/logs/sass-$t.txt 2>/dev/null
    bash scripts/sass_overlap.sh $OUT/logs/sass-$t.txt | awk '{print $1, $2}' | sort | uniq -c
    echo "UTMASTG: $(grep -c UTMASTG $OUT/logs/sass-$t.txt)"
    grep -hE "C7517|C7518|bytes spill" $OUT/logs/build-$t.log | grep -vc " 0 bytes spill"
  done; } >$OUT/sass.txt 2>&1
rm -f $OUT/logs/sass-*.txt
FA3_AB_COMMIT="base = ${AB_BASE:-see index.json}; tma = base + tma-store.patch" \
  FA3_PROBE_SHAPES="128:512:full 128:1024:full 128:1024:causal 128:2048:causal 128:8192:full 64:1024:causal 64:8192:causal" \
  FA3_PROBE_ROUNDS=${ROUNDS:-6} FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-470} )) \
  bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base tma=.ab/tma
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
