#!/usr/bin/env bash
# One device call for two prepared fa3 changes (trees made beforehand, carried: .ab/base, .ab/m192, .ab/epi):
#   bash scripts/ab_trees.sh .ab base m192=bench/results/h100-20261205-fa3-d64-causal-m192/m192-everywhere.patch \
#     epi=bench/results/h100-20261205-fa3-first-block-wait/first-block-wait.patch
#   then on the GPU machine: bash bench/results/h100-20261205-fa3-first-block-wait/run.sh $OUT
# The fa3 sweep A/B of the three trees (two passes, cuDNN once), the fa3 GPU tests on epi (with the mbarrier
# watchdog) and on m192, then a probe of causal head dim 64 at N 256..1536 (16384 tokens, 32 heads,
# `flashattn run --warmup-ms 200`, 20 calls) on base and m192, two passes in alternating order (probe.txt).
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-HEAD of the day}; m192 = base + m192-everywhere.patch; epi = base + first-block-wait.patch" \
  FA3_AB_TESTS=epi FA3_AB_WATCHDOG=1 FA3_AB_PASSES=2 timeout ${AB_LIMIT:-400} bash scripts/fa3_ab.sh $OUT base=.ab/base m192=.ab/m192 epi=.ab/epi \
  > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "tests:|FAILED|spill stores" $OUT/ab.log | grep -v " 0 bytes spill" | tail -n 6
tail -n 45 $OUT/ab-run.log
left=$(( ${LIMIT:-570} - ($(date +%s) - t0) ))
if [ $left -gt 60 ]; then
  (cmake --build .ab/m192/build-ab -j 16 --target flashattn_tests_gpu > $OUT/m192-tests.log 2>&1 &&
   timeout $(( left - 40 )) .ab/m192/build-ab/tests/flashattn_tests_gpu --gtest_filter='Fa3*:*GpuForward*fa3*' >> $OUT/m192-tests.log 2>&1)
  echo "m192 tests rc $? at $(( $(date +%s) - t0 )) s"; tail -n 3 $OUT/m192-tests.log
fi
: > $OUT/probe.txt
for pass in 1 2; do
  order="base m192"; [ $pass -eq 2 ] && order="m192 base"
  for tree in $order; do
    for n in 256 384 512 640 768 896 1024 1280 1536; do
      [ $(( ${LIMIT:-570} - ($(date +%s) - t0) )) -gt 10 ] || break 3
      b=$(( 16384 / n ))
      j=$(timeout 30 .ab/$tree/build-ab/flashattn run --backend cuda --algo fa3 --head-dim 64 --heads 32 --causal \
            --batch $b --seqlen-q $n --warmup-ms 200 --repeat 20 --json 2>/dev/null)
      python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("probe pass=%s tree=%s N=%s b=%s tflops=%.1f %s pass_check=%s" % (sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], d["forward"]["tflops"], d["kernel"], d["pass"]))' \
        "$j" $pass $tree $n $b >> $OUT/probe.txt 2>&1 || echo "probe pass=$pass tree=$tree N=$n FAILED" >> $OUT/probe.txt
    done
  done
done
echo "probe done at $(( $(date +%s) - t0 )) s"; cat $OUT/probe.txt
