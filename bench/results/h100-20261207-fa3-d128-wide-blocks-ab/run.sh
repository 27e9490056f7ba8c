#!/usr/bin/env bash
# Device call (~200 s): candidate-144.patch applied to the copy on the GPU machine, scripts/candidate_ab.sh
# (CAND_ALGO=fa3) with the candidate's fa3 GPU tests and sanitizers into OUT/k144; with FORMS="144 176" then
# candidate-176.patch on top and the same into OUT/k176 (its kernels spill: not run by default). Each part is
# packed into one archive (OUT/k144.tar.gz, OUT/k176.tar.gz).
# On the GPU machine: bash bench/results/h100-20261207-fa3-d128-wide-blocks-ab/run.sh $OUT
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=$1
shapes=${SHAPES:-"64:4096:0,128:2048:0,128:4096:0,128:8192:0,128:16384:0,128:8192:1"}
patches="$D/candidate-144.patch"
for n in ${FORMS:-144}; do
  [ "$n" = 176 ] && patches="$D/candidate-176.patch"
  mkdir -p "$OUT/k$n"
  CAND_ALGO=fa3 CAND_TESTS=${CAND_TESTS:-1} CAND_PATCH="$patches" CAND_SHAPES="$shapes" \
    CAND_ROUNDS=${ROUNDS:-20} CAND_CALLS=${CALLS:-10} bash scripts/candidate_ab.sh "$OUT/k$n" 2>&1 |
    tee "$OUT/k$n/console.txt" | tail -n 20
  tar -czf "$OUT/k$n.tar.gz" -C "$OUT" "k$n" && rm -rf "${OUT:?}/k$n"
done
