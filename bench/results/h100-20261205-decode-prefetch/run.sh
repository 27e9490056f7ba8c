#!/usr/bin/env bash
# The device call for this folder (trees made beforehand, carried: .ab/base, .ab/pf):
#   bash scripts/ab_trees.sh .ab base pf=bench/results/h100-20261205-decode-prefetch/prefetch.patch+bench/results/h100-20261205-decode-prefetch/prefetch-knob.patch
#   then on the GPU machine: bash bench/results/h100-20261205-decode-prefetch/run.sh $OUT
# The decode A/B (scripts/fa3_ab.sh, FA3_AB_BENCH=decode) with the decode GPU tests on pf, then the prefetch
# count swept through FLASHATTN_DECODE_PREFETCH on pf's CLI beside base's, alternating order, two passes.
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_BENCH=decode FA3_AB_COMMIT="base = ${AB_BASE:-e7ddbe1}; pf = base + prefetch.patch + prefetch-knob.patch" \
  FA3_AB_TESTS=pf FA3_AB_PASSES=2 timeout ${AB_LIMIT:-330} bash scripts/fa3_ab.sh $OUT/ab base=.ab/base pf=.ab/pf \
  > $OUT/ab-run.log 2>&1
echo "fa3_ab rc $? in $(( $(date +%s) - t0 )) s"
grep -E "tests:|FAILED|spill" $OUT/ab/ab.log | tail -n 8
tail -n 30 $OUT/ab-run.log
K=$(mktemp -d)
runs=(base p0 p1 p2 p4 p8)
for pass in 1 2; do
  order=("${runs[@]}")
  [ $pass -eq 2 ] && order=(p8 p4 p2 p1 p0 base)
  for r in "${order[@]}"; do
    [ $(( $(date +%s) - t0 )) -gt ${KNOB_LIMIT:-520} ] && { echo "knob: out of time at pass $pass $r"; break 2; }
    if [ $r = base ]; then bin=.ab/base/build-ab/flashattn; env=(); else bin=.ab/pf/build-ab/flashattn; env=(FLASHATTN_DECODE_PREFETCH=${r#p}); fi
    env "${env[@]}" timeout 60 $bin bench --gpu --decode --json $K/$r-$pass.json > $K/$r-$pass.txt 2>&1 || echo "knob $r pass $pass rc $?"
  done
done
python3 - "$K" <<'PY'
import json, glob, os, sys, collections
k = sys.argv[1]
rows = collections.defaultdict(dict)
for f in sorted(glob.glob(os.path.join(k, '*.json'))):
    name, p = os.path.basename(f)[:-5].rsplit('-', 1)
    try: d = json.load(open(f))
    except Exception as e: print('unreadable', f, e); continue
    for r in d.get('rows', []):
        if 'TBps' not in r: continue
        key = (r['b'], r['seqlen_k'], r['layout'])
        rows[key].setdefault(name, []).append((r['TBps'], r.get('trusted_TBps'), r.get('api_TBps')))
for key in sorted(rows):
    line = ' '.join('%s %s' % (n, '/'.join('%.2f' % v[0] for v in rows[key][n]) + ' (trusted ' + '/'.join('%.2f' % (v[1] or 0) for v in rows[key][n]) + ')') for n in ['base','p0','p1','p2','p4','p8'] if n in rows[key])
    print(key, line)
PY
tar -czf $OUT/knob.tar.gz -C $K .
echo "total $(( $(date +%s) - t0 )) s"
