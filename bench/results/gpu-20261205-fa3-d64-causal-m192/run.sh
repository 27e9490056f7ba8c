#!/usr/bin/env bash
# The device call (trees made beforehand, carried: .ab/base, .ab/m192):
#   bash scripts/ab_trees.sh .ab base m192=bench/results/gpu-20261205-fa3-d64-causal-m192/m192-everywhere.patch
#   then on the GPU machine: bash bench/results/gpu-20261205-fa3-d64-causal-m192/run.sh $OUT
# The fa3 sweep A/B of base and m192 (two passes, cuDNN once) with the fa3 GPU tests on m192, then a probe of
# head dim 64 causal from N 256 to 1536 (16384 tokens, 32 heads, `flashattn run --warmup-ms 200`, 20 calls)
# on both trees, two passes in alternating order (probe.txt).
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-HEAD of the day}; m192 = base + m192-everywhere.patch" \
  FA3_AB_TESTS=m192 FA3_AB_PASSES=2 timeout ${AB_LIMIT:-360} bash scripts/fa3_ab.sh $OUT base=.ab/base m192=.ab/m192 \
  > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "tests:|FAILED|spill stores" $OUT/ab.log | grep -v " 0 bytes spill" | tail -n 6
tail -n 42 $OUT/ab-run.log
: > $OUT/probe.txt
for pass in 1 2; do
  order="base m192"; [ $pass -eq 2 ] && order="m192 base"
  for tree in $order; do
    for n in 256 384 512 640 768 896 1024 1280 1536; do
      [ $(( ${LIMIT:-540} - ($(date +%s) - t0) )) -gt 15 ] || break 3
      b=$(( 16384 / n ))
      j=$(timeout 30 .ab/$tree/build-ab/flashattn run --backend cuda --algo fa3 --head-dim 64 --heads 32 --causal \
            --batch $b --seqlen-q $n --warmup-ms 200 --repeat 20 --json 2>/dev/null)
      python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("probe pass=%s tree=%s N=%s b=%s tflops=%.1f %s pass_check=%s" % (sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], d["forward"]["tflops"], d["kernel"], d["pass"]))' \
        "$j" $pass $tree $n $b >> $OUT/probe.txt 2>&1 || echo "probe pass=$pass tree=$tree N=$n FAILED" >> $OUT/probe.txt
    done
  done
done
echo "probe done at $(( $(date +%s) - t0 )) s"; cat $OUT/probe.txt
