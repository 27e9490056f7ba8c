#!/usr/bin/env bash
# Device call (~300 s): candidate.patch applied to the copy on the GPU machine, then scripts/candidate_ab.sh
# for the fa2 forward and backward (CAND_BACKWARD=both) with the candidate's fa2 GPU tests, memcheck and
# racecheck (CAND_TESTS=0 for timing only). The patch is against the commit in index.json.
# On the GPU machine: bash bench/results/h100-20261207-fa2-d256-candidate-ab/run.sh $OUT
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAND_ALGO=fa2 CAND_BACKWARD=both CAND_TESTS=${CAND_TESTS:-1} CAND_PATCH="$D/candidate.patch" \
  CAND_SHAPES=${SHAPES:-"128:2048:0,256:512:0,256:2048:0,256:8192:0,256:2048:1"} \
  CAND_SHAPES_BWD=${SHAPES_BWD:-"128:2048:0,256:2048:0,256:8192:0,256:2048:1"} \
  CAND_ROUNDS=${ROUNDS:-30} CAND_CALLS=${CALLS:-10} bash scripts/candidate_ab.sh "$1"
