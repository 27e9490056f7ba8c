#!/usr/bin/env bash
# Device call (~400 s with both forms): scripts/candidate_ab_forms.sh with stages-3.patch (three stages), then
# stages-4.patch on top (four): each form through scripts/candidate_ab.sh (CAND_ALGO=fa3: one build with both
# forms, the candidate's fa3 GPU tests and sanitizers, the ptxas summary, bench/candidate_ab.py), packed as
# OUT/s3.tar.gz and OUT/s4.tar.gz. FORMS=3 runs the first alone.
# On the GPU machine: bash bench/results/h100-20261207-fa3-d64-ring-ab/run.sh $OUT
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
forms=()
for n in ${FORMS:-3 4}; do forms+=("s$n=$D/stages-$n.patch"); done
CAND_ALGO=fa3 CAND_TESTS=${CAND_TESTS:-1} CAND_SHAPES=${SHAPES:-"64:2048:0,64:512:1,64:1024:1,128:1024:0"} \
  CAND_ROUNDS=${ROUNDS:-30} CAND_CALLS=${CALLS:-10} bash scripts/candidate_ab_forms.sh "$1" "${forms[@]}"
