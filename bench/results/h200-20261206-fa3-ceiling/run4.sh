#!/usr/bin/env bash
# Prepared call: the per-block timeline of CTA 0's consumer warpgroups (clock64 around each phase of the main
# loop's block: wait for K/V and the turn, issue, wait for Q K^T, softmax, wait for P V, packing), recorded
# in the 20th launch and printed on stderr (timeline.patch), for the shipped kernel and for the one without
# softmax and for the one that passes the ping-pong turn after its Q K^T completes. Trees made beforehand and
# carried (.ab/tl_base, .ab/tl_no_softmax, .ab/tl_turnqk):
#   D=bench/results/h200-20261206-fa3-ceiling
#   AB_COMMIT=9a773ff bash scripts/ab_trees.sh .ab tl_base=$D/timeline.patch \
#     tl_no_softmax=$D/no-softmax.patch+$D/timeline.patch tl_turnqk=$D/timeline-turn-after-qk.patch
#   then on the GPU machine: bash bench/results/h200-20261206-fa3-ceiling/run4.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT flashattn_cli .ab/tl_base .ab/tl_no_softmax .ab/tl_turnqk
: > $OUT/timeline.txt
for d in 128 64; do
  for t in tl_base tl_no_softmax tl_turnqk; do
    echo "== $t d $d" >> $OUT/timeline.txt
    timeout 60 .ab/$t/build-ab/flashattn run --backend cuda --algo fa3 --head-dim $d --heads $((2048 / d)) \
      --batch 2 --seqlen-q 8192 --warmup-ms 300 --warmup 30 --repeat 20 >> $OUT/timeline.txt 2>&1
  done
done
python3 - $OUT/timeline.txt <<'PY' | tee $OUT/timeline-summary.txt
import re, statistics, sys
runs, cur = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+) d (\d+)", line)
    if m:
        cur = runs.setdefault((m[1], int(m[2])), {}); continue
    m = re.match(r"tl wg (\d) blk +(\d+) at +(-?\d+) wait_kv_turn +(-?\d+) issue +(-?\d+) wait_qk +(-?\d+) "
                 r"softmax +(-?\d+) wait_pv +(-?\d+) pack +(-?\d+)", line)
    if m and cur is not None:
        cur.setdefault(int(m[1]), []).append([int(x) for x in m.groups()[1:]])
names = ["wait_kv_turn", "issue", "wait_qk", "softmax", "wait_pv", "pack"]
for (tree, d), wgs in runs.items():
    print(f"{tree} d {d}: medians over blocks 8..55 (cycles)")
    for g, rows in sorted(wgs.items()):
        steady = [r for r in rows if 8 <= r[0] <= 55]
        if len(steady) < 2: continue
        period = statistics.median(b[1] - a[1] for a, b in zip(steady, steady[1:]))
        cells = "  ".join(f"{n} {statistics.median(r[2 + i] for r in steady):6.0f}" for i, n in enumerate(names))
        print(f"  wg {g}: period {period:6.0f}  {cells}")
    if 0 in wgs and 1 in wgs:
        a = {r[0]: r for r in wgs[0]}; b = {r[0]: r for r in wgs[1]}
        # when wg 1 holds the turn (its issue starts) relative to wg 0's, same block
        lag = [b[k][1] + b[k][2] - (a[k][1] + a[k][2]) for k in range(8, 56) if k in a and k in b]
        if lag: print(f"  wg 1 issues {statistics.median(lag):.0f} cycles after wg 0 (median, same block)")
PY
echo "done at $(( $(date +%s) - t0 )) s"
