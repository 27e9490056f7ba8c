#!/usr/bin/env bash
# Prepared call (~150 s): the fa3 per-block timeline with tile transitions at d 128 over N 1024,
# 2048 and 8192. Tree made beforehand and carried (.ab):
#   AB_COMMIT=304b75e bash scripts/ab_trees.sh .ab tl=bench/results/h100-20261206-fa3-tile-transitions/timeline-transitions.patch
# then on the GPU machine: bash bench/results/h100-20261206-fa3-tile-transitions/run.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT/logs flashattn_cli .ab/tl
for n in 1024 2048 8192; do
  FA3_TIMELINE_DIMS="128" FA3_TIMELINE_SEQLEN=$n bash scripts/fa3_timeline.sh $OUT/n$n tl=.ab/tl
done
{ for n in 1024 2048 8192; do echo "== N $n"; cat $OUT/n$n/timeline-summary.txt; done; } > $OUT/summary.txt
tar -czf $OUT/logs.tar.gz -C $OUT logs n1024 n2048 n8192 && rm -rf $OUT/logs $OUT/n1024 $OUT/n2048 $OUT/n8192
echo "done at $(( $(date +%s) - t0 )) s"
