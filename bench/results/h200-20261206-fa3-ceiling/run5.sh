#!/usr/bin/env bash
# Prepared call: part of the exponentials on the FMA pipe at head dim 128 (FA4's split), 1 and 2 of every 8
# scores (poly-exp2-1-of-8.patch, poly-exp2-2-of-8.patch), and the ping-pong turn passed after the Q K^T
# completes (turn-after-qk.patch), against the shipped kernel: `flashattn check --backend cuda --algo fa3` on
# the three changed trees, then rounds of scripts/fa3_probe.sh on d 128 shapes and d 64 N 8192 (each run also
# checks sampled rows against the float64 reference). Trees made beforehand and carried:
#   D=bench/results/h200-20261206-fa3-ceiling
#   AB_COMMIT=9a773ff bash scripts/ab_trees.sh .ab base poly1=$D/poly-exp2-1-of-8.patch poly2=$D/poly-exp2-2-of-8.patch \
#     turnqk=$D/turn-after-qk.patch
#   then on the GPU machine: bash bench/results/h200-20261206-fa3-ceiling/run5.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT flashattn_cli .ab/base .ab/poly1 .ab/poly2 .ab/turnqk
for t in poly1 poly2 turnqk; do
  timeout 120 .ab/$t/build-ab/flashattn check --backend cuda --algo fa3 > $OUT/check-$t.txt 2>&1
  echo "check $t rc $?: $(tail -n 1 $OUT/check-$t.txt)"
done
FA3_PROBE_SHAPES="128:8192:full 128:2048:full 128:8192:causal 64:8192:full" FA3_PROBE_ROUNDS=${ROUNDS:-6} \
  FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-560} - 20 )) \
  bash scripts/fa3_probe.sh $OUT/probe-poly.txt base=.ab/base poly1=.ab/poly1 poly2=.ab/poly2 turnqk=.ab/turnqk
for t in base poly1 poly2 turnqk; do gzip -9 $OUT/build-$t.log; done
echo "done at $(( $(date +%s) - t0 )) s"
