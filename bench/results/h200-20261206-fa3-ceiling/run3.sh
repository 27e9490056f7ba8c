#!/usr/bin/env bash
# Prepared third call: Nsight Compute of the base kernel and of the probe trees at d 128 and d 64, N 8192, to
# see where the softmax's time shows (the consumers' waits on their own Q K^T, on the ping-pong turn, on P V,
# and the tensor pipe's active share). Trees made beforehand and carried (.ab/base, .ab/no_exp2,
# .ab/no_softmax; scripts/ab_trees.sh with the two patches of this folder):
#   bash bench/results/h200-20261206-fa3-ceiling/run3.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
TREES=${TREES:-base no_exp2 no_softmax}
bash scripts/ab_build.sh $OUT flashattn_cli $(for t in $TREES; do echo .ab/$t; done)
mkdir -p $OUT/ncu
for t in $TREES; do
  FLASHATTN_BUILD_DIR=.ab/$t/build-ab bash scripts/ncu_profile.sh $OUT/ncu/$t fa3_d128_n8192 fa3_d64_n8192
  for p in fa3_d128_n8192 fa3_d64_n8192; do
    { echo "== $t $p"; grep -E "Duration|SM Frequency|Tensor|Issue Slots Busy|Eligible Warps|Executed Instructions " \
        $OUT/ncu/$t/$p.txt | head -20
      python3 scripts/ncu_stalls.py $OUT/ncu/$t/${p}_sass.csv.gz --top 25; } >> $OUT/stalls.txt 2>&1
  done
  echo "$t profiled at $(( $(date +%s) - t0 )) s"
done
tar -czf $OUT/ncu.tar.gz -C $OUT ncu && rm -rf $OUT/ncu
for t in $TREES; do gzip -9 $OUT/build-$t.log; done
# Files back: gpu.txt, stalls.txt, ncu.tar.gz, build-*.log.gz (six at most).
echo "done at $(( $(date +%s) - t0 )) s"
