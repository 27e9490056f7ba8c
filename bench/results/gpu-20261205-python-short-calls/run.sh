#!/usr/bin/env bash
# One device call: bash bench/results/gpu-20261205-python-short-calls/run.sh $OUT
# Builds the CLI and the Python extension (sm_90a), then for short forward shapes: `flashattn run --algo fa3`
# (the C++ API, queued calls) and probe.py (Python: GPU time per call, host time per call, SDPA cuDNN beside).
set -uo pipefail
OUT=$1
t0=$(date +%s)
D=bench/results/gpu-20261205-python-short-calls
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
which nsys ncu 2>&1 | tee -a $OUT/gpu.txt
B=/tmp/b
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHITECTURES=90a \
  -DFLASHATTN_BUILD_PYTHON=ON > $OUT/build.log 2>&1 && cmake --build $B -j16 --target flashattn_cli _ext >> $OUT/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"
EXT=$(find $B -name '_ext*.so' -print -quit)
P=$(mktemp -d); mkdir -p $P/flashattn && cp python/flashattn/*.py "$EXT" $P/flashattn/
SHAPES="256:512:1 256:512:0 128:512:1 64:512:1 64:512:0 256:1024:1 128:8192:0"
for s in $SHAPES; do
  IFS=: read -r d n c <<< "$s"
  cflag=(); [ "$c" = 1 ] && cflag=(--causal)
  timeout 60 $B/flashattn run --backend cuda --algo fa3 --head-dim $d --seqlen-q $n --batch $(( 16384 / n )) \
    --heads $(( 2048 / d )) "${cflag[@]}" --warmup-ms 500 --repeat 60 --samples 4 2>&1 | grep -E "fa3|TFLOP|alone" | head -4 \
    | sed "s/^/cli $s: /" | tee -a $OUT/cli.txt
done
echo "cli done at $(( $(date +%s) - t0 )) s"
PYTHONPATH=$P timeout 300 python3 $D/probe.py "$(echo $SHAPES | tr ' ' ,)" bench 2>&1 | tee $OUT/probe.txt
echo "done at $(( $(date +%s) - t0 )) s"
