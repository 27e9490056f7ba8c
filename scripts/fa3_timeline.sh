#!/usr/bin/env bash
# Runs the fa3 per-block timeline probe (trees carrying bench/results/h200-20261206-fa3-ceiling/timeline.patch,
# built by scripts/ab_build.sh into TREE/build-ab) at N 8192, batch 2, 2048 / d heads, for each head dim and
# tree; appends each run's output after a "== NAME d D" header to OUTDIR/timeline.txt and writes the per-phase
# medians (scripts/fa3_timeline.py) to OUTDIR/timeline-summary.txt and stdout.
#
# Usage: bash scripts/fa3_timeline.sh OUTDIR NAME=TREE [NAME=TREE ...]
# Environment: FA3_TIMELINE_DIMS (head dims, default "128 64"), FA3_TIMELINE_SEQLEN (default 8192),
# FA3_TIMELINE_BATCH (default 16384 tokens / seqlen, at least 1).
set -uo pipefail

[ $# -ge 2 ] || { echo "usage: $0 OUTDIR NAME=TREE [NAME=TREE ...]" >&2; exit 2; }
OUT=$1
shift
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$OUT"
: >"$OUT/timeline.txt"
seqlen=${FA3_TIMELINE_SEQLEN:-8192}
batch=${FA3_TIMELINE_BATCH:-$(( 16384 / seqlen > 0 ? 16384 / seqlen : 1 ))}
for d in ${FA3_TIMELINE_DIMS:-128 64}; do
  for spec in "$@"; do
    name=${spec%%=*}
    tree=${spec#*=}
    echo "== $name d $d" >>"$OUT/timeline.txt"
    # The probe trees' outputs may be wrong on purpose: the run's check result is not looked at.
    timeout 60 "$tree/build-ab/flashattn" run --backend cuda --algo fa3 --head-dim "$d" --heads $((2048 / d)) \
      --batch "$batch" --seqlen-q "$seqlen" --warmup-ms 300 --warmup 30 --repeat 20 >>"$OUT/timeline.txt" 2>&1
  done
done
python3 "$HERE/fa3_timeline.py" "$OUT/timeline.txt" | tee "$OUT/timeline-summary.txt"
