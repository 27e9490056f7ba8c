#!/usr/bin/env bash
# One device call at the commit under test (the working tree): build for sm_90a, the fa3 GPU tests (every
# Fa3Forward test and the shared GpuForward suite on fa3, with the new head dims), `flashattn check` on fa3,
# memcheck of the partial-column test, then fa3 against fa2 at head dims 64, 96, 128, 192, 256 (forward,
# b 4 x N 4096 x 16 heads, causal and not, --warmup-ms 200) by `flashattn run`.
#   bash bench/results/h100-20261205-fa3-partial-cols/run.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
B=build-pc
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHITECTURES=90a \
  > $OUT/build.log 2>&1 && cmake --build $B -j 16 --target flashattn_tests_gpu flashattn_cli >> $OUT/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"
echo "spilling kernels: $(grep -c '[1-9][0-9]* bytes spill stores' $OUT/build.log)"
grep -oE 'C75[0-9]+' $OUT/build.log | sort | uniq -c
timeout 240 $B/tests/flashattn_tests_gpu --gtest_filter='Fa3*:*GpuForward*/fa3*:*GpuForward*/1' > $OUT/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|tests ran' $OUT/tests.log | head -20
timeout 120 $B/flashattn check --backend cuda --algo fa3 > $OUT/check.log 2>&1
echo "check rc $? at $(( $(date +%s) - t0 )) s"; tail -n 2 $OUT/check.log
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 86 $B/tests/flashattn_tests_gpu \
  --gtest_filter='Fa3Forward.HeadDimsBetweenKernelSizes' > $OUT/memcheck.log 2>&1
echo "memcheck rc $? at $(( $(date +%s) - t0 )) s"; grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/memcheck.log | head -3
: > $OUT/bench.jsonl
for d in 64 96 128 192 256; do
  for mask in "" "--causal"; do
    for algo in fa3 fa2; do
      timeout 30 $B/flashattn run --backend cuda --algo $algo --head-dim $d --batch 4 --seqlen-q 4096 --heads 16 \
        $mask --warmup-ms 200 --json 2>/dev/null | tail -n 1 >> $OUT/bench.jsonl
    done
  done
done
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
for r in rows:
    p = r["problem"]
    print(f"{r['algorithm']:4} d {p['head_dim']:3} causal {int(p['causal'])} {r['forward']['tflops']:7.1f} TFLOP/s"
          f"  pass {r['pass']}  {r['kernel']}")
PY
echo "done at $(( $(date +%s) - t0 )) s"
