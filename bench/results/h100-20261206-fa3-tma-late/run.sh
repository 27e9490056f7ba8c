#!/usr/bin/env bash
# Prepared call (~480 s): tma-late.patch and tma-wg.patch against their commit (scripts/fa3_candidate.sh:
# three trees built, the fa3 GPU tests, memcheck and racecheck of wg and of late, the ptxas and SASS
# summary, then probe rounds until 470 s). Trees made beforehand and carried (.ab):
#   bash scripts/ab_trees.sh .ab base late=bench/results/h100-20261206-fa3-tma-late/tma-late.patch \
#     wg=bench/results/h100-20261206-fa3-tma-late/tma-wg.patch
# then on the GPU machine: AB_BASE=<the trees' commit> bash bench/results/h100-20261206-fa3-tma-late/run.sh $OUT
# Writes gpu.txt, checks.txt, probe.txt and logs.tar.gz into $OUT.
set -uo pipefail
FA3_AB_COMMIT="base = ${AB_BASE:-see index.json}; late = base + tma-late.patch; wg = base + tma-wg.patch" \
  FA3_PROBE_SHAPES="128:512:full 128:1024:full 128:1024:causal 128:2048:causal 128:8192:full 64:1024:causal 64:8192:causal" \
  FA3_PROBE_ROUNDS=${ROUNDS:-5} FA3_CANDIDATE_LIMIT=${LIMIT:-470} FA3_CANDIDATE_TESTED=2 \
  bash scripts/fa3_candidate.sh "$1" base=.ab/base wg=.ab/wg late=.ab/late
