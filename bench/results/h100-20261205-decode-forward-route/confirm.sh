set -uo pipefail
OUT=$1; t0=$(date +%s)
cmake -S . -B build-c -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHITECTURES=90a > $OUT/build.log 2>&1 && cmake --build build-c -j 16 --target flashattn_cli flashattn_tests_gpu >> $OUT/build.log 2>&1; echo "build rc $? at $(( $(date +%s) - t0 )) s"
timeout 90 build-c/tests/flashattn_tests_gpu --gtest_filter='DecodeGpu*:Fa3Forward.AutoPicksFa3WhereItRuns' > $OUT/tests.log 2>&1; echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' $OUT/tests.log | head
for s in "128 1 1 32768 32 8 0" "128 8 4 8192 32 8 1" "128 8 5 8192 32 8 1" "128 8 16 8192 32 8 1"; do
  read -r d b sq sk h hk c <<< "$s"; mask=(); [ "$c" = 1 ] && mask=(--causal)
  for a in auto fa3; do
    timeout 20 build-c/flashattn run --backend cuda --algo $a --head-dim $d --batch $b --seqlen-q $sq --seqlen-k $sk --heads $h --heads-kv $hk "${mask[@]}" --warmup-ms 200 --json 2>/dev/null | tail -n 1 | python3 -c "import json,sys; j=json.load(sys.stdin); print('$a', j['problem']['batch'], j['problem']['seqlen_q'], j['problem']['seqlen_k'], round(j['forward']['ms']*1e3,1), 'us', j['pass'], j['kernel'])"
  done
done | tee $OUT/probe.txt
echo "done at $(( $(date +%s) - t0 )) s"
