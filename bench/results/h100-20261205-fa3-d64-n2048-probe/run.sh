#!/usr/bin/env bash
# One device call (the tree made beforehand and carried: .ab/base = the head, `bash scripts/ab_trees.sh .ab base`):
#   bash bench/results/gpu-20261205-fa3-d64-n2048-probe/run.sh $OUT
# fa3 forward at head dim 64, non-causal, 16k tokens (batch 16384 / N, 32 heads), at lengths around 2048 whose
# 192-row tiles pad differently, six rounds by scripts/fa3_probe.sh (one tree: medians only).
set -uo pipefail
OUT=$1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
cmake -S .ab/base -B .ab/base/build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
  -DFLASHATTN_CUDA_ARCHITECTURES=90a > $OUT/build.log 2>&1 && cmake --build .ab/base/build-ab -j 16 --target flashattn_cli >> $OUT/build.log 2>&1
echo "build rc $?"
FA3_PROBE_ROUNDS=6 FA3_PROBE_SHAPES="64:1024:full 64:1536:full 64:1728:full 64:1920:full 64:2048:full 64:2112:full 64:2304:full 64:3072:full 64:4096:full" \
  bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base
