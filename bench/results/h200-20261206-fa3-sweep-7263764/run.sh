#!/usr/bin/env bash
# Prepared call (~200 s): the CLI at this commit (sm_90a, no tests), `flashattn bench --gpu --algo fa3` over the
# sweep, SDPA cuDNN on its shapes (bench/peers_sdpa.py), merged by bench/compare.py, targets by bench/targets.py.
# On the GPU machine: bash bench/results/h200-20261206-fa3-sweep-7263764/run.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
{
  cmake -S . -B build-sweep -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
    -DFLASHATTN_CUDA_ARCHITECTURES=90a -DFLASHATTN_BUILD_TESTS=OFF &&
  ninja -C build-sweep flashattn_cli
} >$OUT/build.log 2>&1
echo "build rc $? after $(( $(date +%s) - t0 )) s"
build-sweep/flashattn bench --gpu --algo fa3 --json $OUT/ours.json >$OUT/console.txt 2>&1
echo "bench rc $? after $(( $(date +%s) - t0 )) s"
python3 bench/peers_sdpa.py --shapes-from $OUT/ours.json --backends cudnn --json $OUT/peers.json >>$OUT/console.txt 2>&1
echo "peers rc $? after $(( $(date +%s) - t0 )) s"
python3 bench/compare.py --ours $OUT/ours.json --peers $OUT/peers.json --out $OUT/bench.json >$OUT/compare.txt 2>&1
python3 bench/targets.py $OUT >>$OUT/compare.txt 2>&1
grep -E '^fwd|fa3 >=|misses' $OUT/compare.txt
echo "done at $(( $(date +%s) - t0 )) s"
