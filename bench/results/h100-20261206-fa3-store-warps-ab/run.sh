#!/usr/bin/env bash
# Device call (~330 s): the candidate patch applied to the copy on the GPU machine, then
# scripts/fa3_candidate_ab.sh (one build with both forms, the candidate's fa3 GPU tests and sanitizers, the
# ptxas summary, bench/candidate_ab.py). The patch is against the commit in index.json.
# On the GPU machine: bash bench/results/h100-20261206-fa3-store-warps-ab/run.sh $OUT
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAND_PATCH="$D/store-warps-candidate.patch" \
  CAND_SHAPES=${SHAPES:-"256:2048:0,128:512:0,128:1024:0,128:2048:0,64:1024:1,64:2048:0"} \
  CAND_ROUNDS=${ROUNDS:-60} CAND_CALLS=${CALLS:-10} bash scripts/fa3_candidate_ab.sh "$1"
