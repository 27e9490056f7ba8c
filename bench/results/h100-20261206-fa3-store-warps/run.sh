#!/usr/bin/env bash
# Device call (~470 s): store-warps.patch against its commit (scripts/fa3_candidate.sh: both trees built, the
# sw tree's fa3 GPU tests, memcheck and racecheck, the ptxas and SASS summary, then probe rounds until LIMIT).
# Trees made beforehand and carried (.ab):
#   AB_COMMIT=<commit> bash scripts/ab_trees.sh .ab base sw=bench/results/gpu-20261206-fa3-store-warps/store-warps.patch
# then on the GPU machine: AB_BASE=<the trees' commit> bash bench/results/gpu-20261206-fa3-store-warps/run.sh $OUT
# Writes gpu.txt, checks.txt, probe.txt and logs.tar.gz into $OUT.
set -uo pipefail
FA3_AB_COMMIT="base = ${AB_BASE:-see index.json}; sw = base + store-warps.patch" \
  FA3_PROBE_SHAPES="128:512:full 128:1024:full 128:2048:full 64:1024:causal 64:2048:full 256:2048:full" \
  FA3_PROBE_ROUNDS=${ROUNDS:-12} FA3_CANDIDATE_LIMIT=${LIMIT:-460} \
  bash scripts/fa3_candidate.sh "$1" base=.ab/base sw=.ab/sw
