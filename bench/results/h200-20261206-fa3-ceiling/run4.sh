#!/usr/bin/env bash
# Prepared call: the per-block timeline of CTA 0's consumer warpgroups (clock64 around each phase of the main
# loop's block: wait for K/V and the turn, issue, wait for Q K^T, softmax, wait for P V, packing), recorded
# in the 20th launch and printed on stderr (timeline.patch), for the shipped kernel and for the one without
# softmax and for the one that passes the ping-pong turn after its Q K^T completes. Trees made beforehand and
# carried (.ab/tl_base, .ab/tl_no_softmax, .ab/tl_turnqk):
#   D=bench/results/h200-20261206-fa3-ceiling
#   AB_COMMIT=9a773ff bash scripts/ab_trees.sh .ab tl_base=$D/timeline.patch \
#     tl_no_softmax=$D/no-softmax.patch+$D/timeline.patch tl_turnqk=$D/timeline-turn-after-qk.patch
#   then on the GPU machine: bash bench/results/h200-20261206-fa3-ceiling/run4.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT flashattn_cli .ab/tl_base .ab/tl_no_softmax .ab/tl_turnqk
bash scripts/fa3_timeline.sh $OUT tl_base=.ab/tl_base tl_no_softmax=.ab/tl_no_softmax tl_turnqk=.ab/tl_turnqk
echo "done at $(( $(date +%s) - t0 )) s"
