#!/usr/bin/env bash
# Device call (130 s on a warm machine with CAND_TESTS=0): scripts/candidate_ab.sh with threshold.patch (the
# two-consumer head-dim-64 kernel for causal problems up to 2048 rows).
# On the GPU machine: bash bench/results/h100-20261207-fa3-d64-two-consumer-2048-ab/run.sh $OUT
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAND_ALGO=fa3 CAND_PATCH=$D/threshold.patch CAND_TESTS=${CAND_TESTS:-0} \
  CAND_SHAPES=${SHAPES:-"64:2048:1,64:1024:1,64:4096:1,64:2048:0"} CAND_ROUNDS=${ROUNDS:-30} \
  CAND_CALLS=${CALLS:-10} bash scripts/candidate_ab.sh "$1"
