#!/usr/bin/env bash
# Second device call (~330 s): base and sw built again without tests, scripts/fa3_probe.sh rounds on the
# rule's shapes until LIMIT. On the GPU machine: LIMIT=<s> bash bench/results/gpu-20261206-fa3-store-warps/confirm.sh $OUT
set -uo pipefail
FA3_AB_COMMIT="base = 0e28137; sw = base + store-warps.patch" FA3_CANDIDATE_TESTED=0 \
  FA3_PROBE_SHAPES="128:512:full 128:1024:full 64:1024:causal" \
  FA3_PROBE_ROUNDS=${ROUNDS:-16} FA3_CANDIDATE_LIMIT=${LIMIT:-300} \
  bash scripts/fa3_candidate.sh "$1" base=.ab/base sw=.ab/sw
