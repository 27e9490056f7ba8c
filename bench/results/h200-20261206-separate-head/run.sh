#!/usr/bin/env bash
# One device call right after scripts/gpu_check.sh on the same machine (its build-gpu-check folder holds the
# Python extension; built here if it does not):
#   FLASHATTN_COMMIT=<sha> bash bench/results/h200-20261206-separate-head/run.sh $OUT
# bench/interleaved.py --mode separate --warmup-ms 500 over the whole sweep: fa3 forward / SDPA cuDNN, fa2
# forward / SDPA flash, fa2 backward / SDPA flash.
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
B=build-gpu-check
EXT=$(find $B -name '_ext*.so' -print -quit 2>/dev/null)
if [ -z "$EXT" ]; then
  B=/tmp/b
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHITECTURES=90a \
    -DFLASHATTN_BUILD_PYTHON=ON > $OUT/build.log 2>&1 && cmake --build $B -j16 --target _ext >> $OUT/build.log 2>&1
  EXT=$(find $B -name '_ext*.so' -print -quit 2>/dev/null)
  echo "built the extension at $(( $(date +%s) - t0 )) s: ${EXT:-none}"
fi
P=$(mktemp -d); mkdir -p $P/flashattn && cp python/flashattn/*.py "$EXT" $P/flashattn/
for spec in "fwd fa3 cudnn" "fwd fa2 flash" "bwd fa2 flash"; do
  read -r d a p <<< "$spec"
  PYTHONPATH=$P python3 bench/interleaved.py --dir $d --algo $a --peer $p --mode separate --warmup-ms 500 \
    --json $OUT/$d-$a-$p-separate.json > $OUT/$d-$a-$p-separate.txt 2>&1
  echo "$d $a / $p rc $? at $(( $(date +%s) - t0 )) s"; tail -n 2 $OUT/$d-$a-$p-separate.txt
done
