#!/usr/bin/env bash
# Device call (~460 s): q-parts.patch against its commit (scripts/fa3_candidate.sh: both trees built, the qp
# tree's fa3 GPU tests, memcheck and racecheck, the ptxas and SASS summary, then probe rounds until LIMIT).
# Trees made beforehand and carried (.ab):
#   AB_COMMIT=<commit> bash scripts/ab_trees.sh .ab base qp=bench/results/gpu-20261206-fa3-d256-q-parts/q-parts.patch
# then on the GPU machine: AB_BASE=<the trees' commit> bash bench/results/gpu-20261206-fa3-d256-q-parts/run.sh $OUT
# Writes gpu.txt, checks.txt, probe.txt and logs.tar.gz into $OUT.
set -uo pipefail
FA3_AB_COMMIT="base = ${AB_BASE:-see index.json}; qp = base + q-parts.patch" \
  FA3_PROBE_SHAPES="256:1024:full 256:2048:full 256:8192:full 256:4096:causal" \
  FA3_PROBE_ROUNDS=${ROUNDS:-12} FA3_CANDIDATE_LIMIT=${LIMIT:-450} \
  bash scripts/fa3_candidate.sh "$1" base=.ab/base qp=.ab/qp
