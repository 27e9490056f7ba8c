#!/usr/bin/env bash
# Device call (~200 s): candidate.patch applied to the copy on the GPU machine, then scripts/candidate_ab.sh
# with the candidate's fa3 GPU tests, memcheck and racecheck (CAND_TESTS=0 for timing only). The patch is
# against the commit in index.json.
# On the GPU machine: bash bench/results/h200-20261206-fa3-late-drain-ab/run.sh $OUT
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAND_TESTS=${CAND_TESTS:-1} CAND_PATCH="$D/candidate.patch" \
  CAND_SHAPES=${SHAPES:-"256:1024:0,128:512:0,128:1024:0,128:2048:0,128:1024:1,64:1024:1,64:512:1,64:2048:1"} \
  CAND_ROUNDS=${ROUNDS:-30} CAND_CALLS=${CALLS:-10} bash scripts/candidate_ab.sh "$1"
