#!/usr/bin/env bash
# run4.sh (the per-block timeline) and run5.sh (part of the exponentials on the FMA pipe) in one device call,
# their outputs packed so that few files come back. Trees made beforehand and carried (.ab/tl_base,
# .ab/tl_no_softmax, .ab/tl_turnqk, .ab/base, .ab/poly1, .ab/poly2, .ab/turnqk: seven of carry's eight paths;
# the commands are in the two scripts' headers):
#   bash bench/results/h200-20261206-fa3-ceiling/run45.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
HERE=$(dirname "${BASH_SOURCE[0]}")
mkdir -p $OUT/timeline $OUT/poly
bash $HERE/run4.sh $OUT/timeline
echo "timeline done at $(( $(date +%s) - t0 )) s"
LIMIT=$(( 570 - ($(date +%s) - t0) )) bash $HERE/run5.sh $OUT/poly
cp $OUT/timeline/gpu.txt $OUT/gpu.txt
cp $OUT/timeline/timeline-summary.txt $OUT/poly/probe-poly.txt $OUT/ 2>/dev/null
tar -czf $OUT/all.tar.gz -C $OUT timeline poly && rm -rf $OUT/timeline $OUT/poly
echo "done at $(( $(date +%s) - t0 )) s"
