#!/usr/bin/env bash
# Device call (~450 s): q-prefetch.patch against its commit, with the timing-only bound
# ../h100-20261206-fa3-d64-m192-again/no-q-reload-d256.patch (scripts/fa3_candidate.sh: the three trees
# built, the pf tree's fa3 GPU tests, memcheck and racecheck, the ptxas and SASS summary, then probe rounds
# until LIMIT). Trees made beforehand and carried (.ab):
#   AB_COMMIT=<commit> bash scripts/ab_trees.sh .ab base \
#     pf=bench/results/h100-20261206-fa3-d256-q-prefetch/q-prefetch.patch \
#     noq=bench/results/h100-20261206-fa3-d64-m192-again/no-q-reload-d256.patch
# then on the GPU machine: AB_BASE=<the trees' commit> bash bench/results/h100-20261206-fa3-d256-q-prefetch/run.sh $OUT
# Writes gpu.txt, checks.txt, probe.txt and logs.tar.gz into $OUT.
set -uo pipefail
trees="base = ${AB_BASE:-see index.json}; pf = base + q-prefetch.patch; noq = base + no-q-reload-d256.patch"
FA3_AB_COMMIT=$trees \
  FA3_PROBE_SHAPES="256:1024:full 256:2048:full 256:8192:full 256:2048:causal 256:4096:causal 128:1024:full" \
  FA3_PROBE_ROUNDS=${ROUNDS:-8} FA3_CANDIDATE_LIMIT=${LIMIT:-450} \
  bash scripts/fa3_candidate.sh "$1" base=.ab/base pf=.ab/pf noq=.ab/noq
