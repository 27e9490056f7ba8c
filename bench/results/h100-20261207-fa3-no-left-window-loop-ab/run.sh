#!/usr/bin/env bash
# Device call (~250 s with the machine's start): the candidate patch applied to the copy on the GPU machine,
# then scripts/candidate_ab.sh (one build with both forms, the candidate's fa3 GPU tests and sanitizers, the
# ptxas summary, bench/candidate_ab.py). The patch is against 5824c04 (and applies on the later commits).
# On the GPU machine: bash bench/results/h100-20261207-fa3-no-left-window-loop-ab/run.sh $OUT
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
shapes="128:512:0,128:1024:0,128:2048:0,128:8192:0,128:1024:1,128:8192:1,64:512:1,64:1024:1,64:2048:0"
shapes+=",64:8192:1,256:1024:1,256:8192:0"
CAND_ALGO=fa3 CAND_PATCH="$D/no-left-window-loop-candidate.patch" CAND_SHAPES=${SHAPES:-$shapes} \
  CAND_ROUNDS=${ROUNDS:-30} CAND_CALLS=${CALLS:-10} bash scripts/candidate_ab.sh "$1"
