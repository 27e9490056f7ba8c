#!/usr/bin/env bash
# One device call (trees made beforehand and carried: .ab/base, .ab/max4, .ab/max2):
#   bash scripts/ab_trees.sh .ab base max4=bench/results/h100-20261205-fa3-max-chains/max-chains.patch \
#     max2=bench/results/h100-20261205-fa3-max-chains/max2-chains.patch
#   then on the GPU machine: AB_BASE=<sha> bash bench/results/h100-20261205-fa3-max-chains/run.sh $OUT
# The fa3 sweep A/B of the three trees (two passes, no peer), the fa3 GPU tests on max4 (mbarrier
# watchdog), then, while time is left, rounds of `flashattn run` (--warmup-ms 200, 20 calls) on the short
# causal rows (16384 tokens, hidden 2048) over the trees in rotating order (probe.txt).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-430}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_COMMIT="base = ${AB_BASE:-HEAD of the day}; max4 = base + max-chains.patch; max2 = base + max2-chains.patch" \
  FA3_AB_PEERS=0 FA3_AB_TESTS=max4 FA3_AB_WATCHDOG=1 FA3_AB_PASSES=2 timeout $(( LIMIT - 40 )) \
  bash scripts/fa3_ab.sh $OUT base=.ab/base max4=.ab/max4 max2=.ab/max2 > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "tests:|FAILED|spill stores" $OUT/ab.log | grep -v " 0 bytes spill" | tail -n 6
tail -n 45 $OUT/ab-run.log
: > $OUT/probe.txt
trees=(base max4 max2)
for round in 1 2 3 4 5 6; do
  for k in 0 1 2; do
    tree=${trees[$(( (k + round) % 3 ))]}
    for spec in "64 512" "64 1024" "128 512" "256 512"; do
      set -- $spec
      [ $(( LIMIT - ($(date +%s) - t0) )) -gt 8 ] || break 3
      d=$1; n=$2; h=$(( 2048 / d )); b=$(( 16384 / n ))
      j=$(timeout 20 .ab/$tree/build-ab/flashattn run --backend cuda --algo fa3 --head-dim $d --heads $h --causal \
            --batch $b --seqlen-q $n --warmup-ms 200 --repeat 20 --json 2>/dev/null)
      python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("probe round=%s tree=%s d=%s N=%s tflops=%.1f pass_check=%s" % (sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], d["forward"]["tflops"], d["pass"]))' \
        "$j" $round $tree $d $n >> $OUT/probe.txt 2>&1 || echo "probe round=$round tree=$tree d=$d N=$n FAILED" >> $OUT/probe.txt
    done
  done
done
echo "probe done at $(( $(date +%s) - t0 )) s"
python3 - "$OUT/probe.txt" <<'PY'
import re, sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"probe round=\d+ tree=(\w+) d=(\d+) N=(\d+) tflops=([\d.]+)", line)
    if m: rows.setdefault((int(m[2]), int(m[3])), {}).setdefault(m[1], []).append(float(m[4]))
for key in sorted(rows):
    r = rows[key]; b = st.median(r.get("base", [float("nan")]))
    print("d %3d N %5d causal: " % key + "  ".join("%s %.1f (%d, %+.1f%%)" % (t, st.median(v), len(v), 100 * (st.median(v) / b - 1)) for t, v in sorted(r.items())))
PY
