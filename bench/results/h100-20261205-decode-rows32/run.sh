#!/usr/bin/env bash
# One device call (trees made beforehand and carried: .ab/base, .ab/r32):
#   bash scripts/ab_trees.sh .ab base r32=bench/results/h100-20261205-decode-rows32/rows32.patch
#   then on the GPU machine: bash bench/results/h100-20261205-decode-rows32/run.sh $OUT
# Builds both trees (sm_90a; r32 with its GPU tests), runs every decode GPU test and memcheck of the new one
# on r32, then rounds of `flashattn run --kv-cache` on calls of more than 16 rows per KV head, the trees
# alternating, and `flashattn run --algo fa3` on the same shapes as forward calls (LIMIT s in all, default 420).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-420}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for t in base r32; do
  targets=(flashattn_cli); [ $t = r32 ] && targets+=(flashattn_tests_gpu)
  ( cmake -S .ab/$t -B .ab/$t/build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
      -DFLASHATTN_CUDA_ARCHITECTURES=90a > $OUT/build-$t.log 2>&1 &&
    cmake --build .ab/$t/build-ab -j 8 --target "${targets[@]}" >> $OUT/build-$t.log 2>&1; echo "build $t rc $?" ) &
done
wait
echo "built at $(( $(date +%s) - t0 )) s"
for t in base r32; do echo "$t: spilling kernels $(grep -c '[1-9][0-9]* bytes spill stores' $OUT/build-$t.log)"; done
R=.ab/r32/build-ab
timeout 150 $R/tests/flashattn_tests_gpu --gtest_filter='*DecodeGpu*:DecodeHeuristic.*:Fa3Forward.AutoPicksFa3WhereItRuns' > $OUT/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' $OUT/tests.log | head -12
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 86 $R/tests/flashattn_tests_gpu \
  --gtest_filter='DecodeGpuKernels.ThirtyTwoRowKernelsTakeCallsOfMoreThanSixteenRows' > $OUT/memcheck.log 2>&1
echo "memcheck rc $? at $(( $(date +%s) - t0 )) s"; grep -E 'ERROR SUMMARY' $OUT/memcheck.log | head -1
# "d batch seqlen_q cache heads heads_kv page"
SHAPES=("128 8 16 8192 32 8 0" "128 8 8 8192 32 8 0" "128 1 16 32768 32 8 0" "64 8 8 4096 32 8 0"
        "128 4 8 4096 32 4 0" "128 8 5 8192 32 8 0" "128 8 1 8192 32 8 0" "128 8 16 8192 32 8 16")
: > $OUT/probe.jsonl
for round in 1 2 3 4 5 6; do
  [ $(( $(date +%s) - t0 )) -gt $(( LIMIT - 40 )) ] && break
  order=(base r32); [ $(( round % 2 )) -eq 0 ] && order=(r32 base)
  for s in "${SHAPES[@]}"; do
    read -r d b sq n h hk pg <<< "$s"
    for t in "${order[@]}"; do
      j=$(timeout 20 .ab/$t/build-ab/flashattn run --kv-cache --backend cuda --no-check-indices --head-dim $d --batch $b \
            --seqlen-q $sq --cache-len $n --heads $h --heads-kv $hk --page-size $pg --warmup-ms 200 --json 2>/dev/null | tail -n 1)
      echo "{\"round\": $round, \"tree\": \"$t\", \"run\": ${j:-null}}" >> $OUT/probe.jsonl
    done
    if [ "$pg" = 0 ] && [ "$sq" -gt 1 ] && [ "$round" -le 2 ]; then
      j=$(timeout 20 .ab/r32/build-ab/flashattn run --backend cuda --algo fa3 --head-dim $d --batch $b --seqlen-q $sq \
            --seqlen-k $n --heads $h --heads-kv $hk --warmup-ms 200 --json 2>/dev/null | tail -n 1)
      echo "{\"round\": $round, \"tree\": \"fa3\", \"run\": ${j:-null}}" >> $OUT/probe.jsonl
    fi
  done
done
python3 - $OUT/probe.jsonl <<'PY' | tee $OUT/probe.txt
import json, statistics, sys
by = {}
for l in open(sys.argv[1]):
    r = json.loads(l); j = r["run"]
    if not j: continue
    p = j["problem"]
    key = (p["head_dim"], p["batch"], p["seqlen_q"], p["heads"], p["heads_kv"], p.get("page_size", 0) if r["tree"] != "fa3" else 0)
    by.setdefault(key, {}).setdefault(r["tree"], []).append((j["forward"]["ms"], j["pass"], j["kernel"]))
for key, t in by.items():
    med = {k: statistics.median(x[0] for x in v) for k, v in t.items()}
    ok = all(x[1] for v in t.values() for x in v)
    ratio = med.get("base", 0) / med["r32"] if med.get("r32") else 0
    fa3 = f"  fa3 forward {med['fa3']*1e3:.1f} us" if "fa3" in med else ""
    print(f"d {key[0]} b {key[1]} sq {key[2]} h {key[3]}/{key[4]} rows {key[2]*key[3]//key[4]} page {key[5]}: "
          f"base {med.get('base', 0)*1e3:.1f} us  r32 {med.get('r32', 0)*1e3:.1f} us  speedup {ratio:.2f}{fa3}  "
          f"rounds {len(t.get('r32', []))}  checks {'pass' if ok else 'FAIL'}  {t['r32'][0][2] if 'r32' in t else '-'}")
PY
echo "done at $(( $(date +%s) - t0 )) s"
