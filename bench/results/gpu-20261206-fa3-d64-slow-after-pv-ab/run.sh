#!/usr/bin/env bash
# Device call (~130 s, timing only): the candidate patch applied to the copy on the GPU machine, then
# scripts/fa3_candidate_ab.sh without the tests and sanitizers. The patch is against the commit in index.json.
# On the GPU machine: bash bench/results/gpu-20261206-fa3-d64-slow-after-pv-ab/run.sh $OUT
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAND_TESTS=0 CAND_PATCH="$D/slow-after-pv-candidate.patch" \
  CAND_SHAPES=${SHAPES:-"128:1024:0,64:1024:1,64:512:1,64:2048:1"} \
  CAND_ROUNDS=${ROUNDS:-30} CAND_CALLS=${CALLS:-10} bash scripts/fa3_candidate_ab.sh "$1"
