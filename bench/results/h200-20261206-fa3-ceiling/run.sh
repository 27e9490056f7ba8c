#!/usr/bin/env bash
# One device call (trees made beforehand and carried: .ab/base, .ab/no_exp2, .ab/no_softmax):
#   D=bench/results/h200-20261206-fa3-ceiling
#   bash scripts/ab_trees.sh .ab base no_exp2=$D/no-exp2.patch no_softmax=$D/no-softmax.patch
#   then on the GPU machine: bash bench/results/h200-20261206-fa3-ceiling/run.sh $OUT
# Builds the three CLIs (sm_90a), keeps their ptxas reports, times fa3 on four long non-causal shapes in
# rotating order (scripts/fa3_probe.sh), and measures the bf16 GEMM ceiling with the same 200 ms warm-up.
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for t in base no_exp2 no_softmax; do
  ( cmake -S .ab/$t -B .ab/$t/build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
      -DFLASHATTN_CUDA_ARCHITECTURES=90a > $OUT/build-$t.log 2>&1 &&
    cmake --build .ab/$t/build-ab -j 6 --target flashattn_cli >> $OUT/build-$t.log 2>&1; echo "build $t rc $?" ) &
done
wait
echo "built at $(( $(date +%s) - t0 )) s"
for t in base no_exp2 no_softmax; do
  echo "$t: $(grep -cE ' [1-9][0-9]* bytes spill stores' $OUT/build-$t.log) of $(grep -c 'bytes spill stores' \
    $OUT/build-$t.log) kernel builds spill; wgmma warnings (C75xx): $(grep -c 'C75[0-9][0-9]' $OUT/build-$t.log)"
done > $OUT/ptxas.txt 2>&1
cat $OUT/ptxas.txt
gemm() {
  python3 - <<'PY'
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
t = time.time()
while time.time() - t < 0.2: a @ b
torch.cuda.synchronize()
ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
for s, e in ev: s.record(); a @ b; e.record()
torch.cuda.synchronize()
ms = sorted(s.elapsed_time(e) for s, e in ev)[10]
print("gemm 8192^3 bf16 median %.3f ms %.1f TFLOP/s" % (ms, 2 * 8192 ** 3 / ms / 1e9))
PY
}
gemm | tee $OUT/gemm.txt
FA3_PROBE_SHAPES="128:8192:full 128:16384:full 64:8192:full 256:8192:full" FA3_PROBE_ROUNDS=${ROUNDS:-5} \
  FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-560} - 30 )) \
  bash scripts/fa3_probe.sh $OUT/probe.txt base=.ab/base no_exp2=.ab/no_exp2 no_softmax=.ab/no_softmax
gemm | tee -a $OUT/gemm.txt
echo "done at $(( $(date +%s) - t0 )) s"
