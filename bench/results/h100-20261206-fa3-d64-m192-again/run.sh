#!/usr/bin/env bash
# Prepared call (~470 s): m192-everywhere.patch against its commit, and the timing-only bound
# no-q-reload-d256.patch (scripts/fa3_candidate.sh: the three trees built, the m192 tree's fa3 GPU tests,
# memcheck and racecheck, the ptxas and SASS summary, then probe rounds until LIMIT). Trees made beforehand
# and carried (.ab):
#   AB_COMMIT=<commit> bash scripts/ab_trees.sh .ab base \
#     m192=bench/results/gpu-20261206-fa3-d64-m192-again/m192-everywhere.patch \
#     noq=bench/results/gpu-20261206-fa3-d64-m192-again/no-q-reload-d256.patch
# then on the GPU machine: AB_BASE=<the trees' commit> bash bench/results/gpu-20261206-fa3-d64-m192-again/run.sh $OUT
# Writes gpu.txt, checks.txt, probe.txt and logs.tar.gz into $OUT.
set -uo pipefail
trees="base = ${AB_BASE:-see index.json}; m192 = base + m192-everywhere.patch"
trees="$trees; noq = base + no-q-reload-d256.patch"
FA3_AB_COMMIT=$trees \
  FA3_PROBE_SHAPES="64:512:causal 64:1024:causal 64:2048:causal 256:1024:full 256:2048:full 256:8192:full" \
  FA3_PROBE_ROUNDS=${ROUNDS:-8} FA3_CANDIDATE_LIMIT=${LIMIT:-450} \
  bash scripts/fa3_candidate.sh "$1" base=.ab/base m192=.ab/m192 noq=.ab/noq
