#!/usr/bin/env bash
# Rounds of `flashattn run` (fa3 forward, --warmup-ms 200, 20 calls) on a few shapes over the trees of an
# A/B made by scripts/fa3_ab.sh (each tree's CLI in TREE/build-ab), the trees in rotating order from round to
# round, so that a drift of the clock favours none. A finer look than the sweep at rows where a change
# should show: every round times each tree on each shape once.
#
# Usage: bash scripts/fa3_probe.sh OUT.txt NAME=TREE [NAME=TREE ...]
# Environment: FA3_PROBE_SHAPES (default "64:512:causal 64:1024:causal 128:512:causal 256:512:causal":
# head dim, seqlen, causal or full; 16384 tokens and hidden 2048 as in the sweep), FA3_PROBE_ROUNDS
# (default 6), FA3_PROBE_UNTIL (epoch seconds: no run starts within 8 s of it; default none).
# Writes one line per run into OUT.txt, then prints each shape's median per tree and its change against the
# first tree (also appended to OUT.txt).
set -uo pipefail

[ $# -ge 2 ] || { echo "usage: $0 OUT.txt NAME=TREE [NAME=TREE ...]" >&2; exit 2; }
OUT=$1
shift
names=() trees=()
for arg in "$@"; do
  names+=("${arg%%=*}")
  trees+=("${arg#*=}")
done
count=${#names[@]}
SHAPES=${FA3_PROBE_SHAPES:-64:512:causal 64:1024:causal 128:512:causal 256:512:causal}
ROUNDS=${FA3_PROBE_ROUNDS:-6}
UNTIL=${FA3_PROBE_UNTIL:-0}
: >"$OUT"

for ((round = 1; round <= ROUNDS; ++round)); do
  for ((k = 0; k < count; ++k)); do
    i=$(( (k + round - 1) % count ))
    for shape in $SHAPES; do
      IFS=: read -r d n mask <<<"$shape"
      if [ "$UNTIL" -gt 0 ] && [ $(( UNTIL - $(date +%s) )) -le 8 ]; then
        echo "fa3_probe: time is up after round $((round - 1))" >&2
        break 3
      fi
      causal=()
      [ "$mask" = causal ] && causal=(--causal)
      j=$(timeout 20 "${trees[$i]}/build-ab/flashattn" run --backend cuda --algo fa3 --head-dim "$d" \
            --heads $((2048 / d)) --batch $((16384 / n)) --seqlen-q "$n" "${causal[@]}" \
            --warmup-ms 200 --repeat 20 --json 2>/dev/null)
      python3 -c 'import json, sys
d = json.loads(sys.argv[1])
print("probe round=%s tree=%s d=%s N=%s mask=%s tflops=%.1f pass_check=%s" % (*sys.argv[2:7], d["forward"]["tflops"], d["pass"]))' \
        "$j" "$round" "${names[$i]}" "$d" "$n" "$mask" >>"$OUT" 2>/dev/null ||
        echo "probe round=$round tree=${names[$i]} d=$d N=$n mask=$mask FAILED" >>"$OUT"
    done
  done
done

python3 - "$OUT" "${names[0]}" <<'PY' | tee -a "$OUT"
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"probe round=\d+ tree=(\S+) d=(\d+) N=(\d+) mask=(\S+) tflops=([\d.]+)", line)
    if m:
        rows.setdefault((int(m[2]), int(m[3]), m[4]), {}).setdefault(m[1], []).append(float(m[5]))
for key in sorted(rows):
    r = rows[key]
    base = statistics.median(r[sys.argv[2]]) if sys.argv[2] in r else float("nan")
    cells = ["%s %.1f (%d, %+.1f%%)" % (t, statistics.median(v), len(v), 100 * (statistics.median(v) / base - 1))
             for t, v in r.items()]
    print("median d %3d N %5d %-6s: " % key + "  ".join(cells))
PY
