#!/usr/bin/env bash
# Device call (~400 s with both forms): stages-3.patch applied to the copy on the GPU machine, then
# scripts/candidate_ab.sh (CAND_ALGO=fa3: one build with both forms, the candidate's fa3 GPU tests and
# sanitizers, the ptxas summary, bench/candidate_ab.py) into OUT/s3; then stages-4.patch on top (the
# candidate's ring from three to four stages) and the same into OUT/s4 (FORMS="3" runs the first alone). Each
# part is packed into one archive (OUT/s3.tar.gz, OUT/s4.tar.gz).
# On the GPU machine: bash bench/results/gpu-20261207-fa3-d64-ring-ab/run.sh $OUT
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=$1
shapes=${SHAPES:-"64:2048:0,64:512:1,64:1024:1,128:1024:0"}
for n in ${FORMS:-3 4}; do
  mkdir -p "$OUT/s$n"
  CAND_ALGO=fa3 CAND_TESTS=${CAND_TESTS:-1} CAND_PATCH="$D/stages-$n.patch" CAND_SHAPES="$shapes" \
    CAND_ROUNDS=${ROUNDS:-30} CAND_CALLS=${CALLS:-10} bash scripts/candidate_ab.sh "$OUT/s$n" 2>&1 |
    tee "$OUT/s$n/console.txt" | tail -n 20
  tar -czf "$OUT/s$n.tar.gz" -C "$OUT" "s$n" && rm -rf "${OUT:?}/s$n"
done
