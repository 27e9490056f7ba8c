#!/usr/bin/env bash
# Prepared call (~400 s), three questions about the fa3 softmax (timing-only probe trees):
#  1. Does the other consumer's GEMM work slow a consumer's softmax? The per-block timeline (timeline.patch)
#     of the shipped kernel and of two trees in which consumer 1 runs no GEMMs and no softmax in the main loop
#     (idle-consumer1.patch; its rows come out wrong), one of them also without exponentials (no-exp2.patch).
#  2. What would a softmax without the block max gain? no-block-max.patch forms the max only in a row's first
#     visible block and never rescales after it (right for random inputs, not in general): its timeline, and
#     scripts/fa3_probe.sh rounds against the shipped kernel.
#  3. What would a softmax without its block sum gain (a row sum formed by the tensor core instead, as a
#     column of ones beside V)? no-block-sum.patch leaves the sum out (outputs wrong): the same two measures.
# d 128 and d 64, N 8192 (timelines). Trees made beforehand and carried (.ab):
#   F=bench/results/h200-20261206-fa3-ceiling; D=bench/results/h100-20261206-fa3-idle-probe
#   AB_COMMIT=9a773ff bash scripts/ab_trees.sh .ab tl_base=$F/timeline.patch \
#     tl_idle1=$F/timeline.patch+$D/idle-consumer1.patch \
#     tl_idle1_noexp2=$F/no-exp2.patch+$F/timeline.patch+$D/idle-consumer1.patch \
#     tl_nomax=$D/no-block-max.patch+$F/timeline.patch tl_nosum=$D/no-block-sum.patch+$F/timeline.patch \
#     base nomax=$D/no-block-max.patch nosum=$D/no-block-sum.patch
#   then on the GPU machine: bash bench/results/h100-20261206-fa3-idle-probe/run.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT/logs flashattn_cli .ab/tl_base .ab/tl_idle1 .ab/tl_idle1_noexp2 .ab/tl_nomax .ab/tl_nosum \
  .ab/base .ab/nomax .ab/nosum
bash scripts/fa3_timeline.sh $OUT tl_base=.ab/tl_base tl_idle1=.ab/tl_idle1 tl_idle1_noexp2=.ab/tl_idle1_noexp2 \
  tl_nomax=.ab/tl_nomax tl_nosum=.ab/tl_nosum
FA3_AB_COMMIT='base = 9a773ff; nomax = 9a773ff + no-block-max.patch; nosum = 9a773ff + no-block-sum.patch' \
  FA3_PROBE_SHAPES="128:8192:full 128:2048:full 128:8192:causal 64:8192:full" FA3_PROBE_ROUNDS=${ROUNDS:-5} \
  FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-540} )) bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base nomax=.ab/nomax \
  nosum=.ab/nosum
tar -czf $OUT/logs.tar.gz -C $OUT logs timeline.txt && rm -rf $OUT/logs $OUT/timeline.txt
echo "done at $(( $(date +%s) - t0 )) s"
