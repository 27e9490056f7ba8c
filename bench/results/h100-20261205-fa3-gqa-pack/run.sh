#!/usr/bin/env bash
# One device call (trees made beforehand and carried: .ab/base, .ab/pack):
#   bash scripts/ab_trees.sh .ab base pack=bench/results/gpu-20261205-fa3-gqa-pack/gqa-pack.patch
#   then on the GPU machine: bash bench/results/gpu-20261205-fa3-gqa-pack/run.sh $OUT
# Builds both trees (sm_90a; pack with its GPU tests), runs the fa3 GPU tests and `flashattn check --algo fa3`
# on pack, memcheck of the packed-tile test, then rounds of `flashattn run --algo fa3` on GQA shapes with few
# query tokens and one MHA control, the trees alternating (LIMIT seconds in all, default 420).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-420}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for t in base pack; do
  targets=(flashattn_cli); [ $t = pack ] && targets+=(flashattn_tests_gpu)
  ( cmake -S .ab/$t -B .ab/$t/build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
      -DFLASHATTN_CUDA_ARCHITECTURES=90a > $OUT/build-$t.log 2>&1 &&
    cmake --build .ab/$t/build-ab -j 8 --target "${targets[@]}" >> $OUT/build-$t.log 2>&1; echo "build $t rc $?" ) &
done
wait
echo "built at $(( $(date +%s) - t0 )) s"
for t in base pack; do
  echo "$t: spilling kernels $(grep -c '[1-9][0-9]* bytes spill stores' $OUT/build-$t.log);" \
       "$(grep -oE 'C75[0-9]+' $OUT/build-$t.log | sort | uniq -c | tr '\n' ' ')"
done
P=.ab/pack/build-ab
timeout 200 $P/tests/flashattn_tests_gpu --gtest_filter='Fa3*:*GpuForward*/fa3*' > $OUT/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' $OUT/tests.log | head -12
timeout 60 $P/flashattn check --backend cuda --algo fa3 > $OUT/check.log 2>&1
echo "check rc $?"; tail -n 1 $OUT/check.log
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 86 $P/tests/flashattn_tests_gpu \
  --gtest_filter='Fa3Forward.GqaPackedTiles' > $OUT/memcheck.log 2>&1
echo "memcheck rc $? at $(( $(date +%s) - t0 )) s"; grep -E 'ERROR SUMMARY' $OUT/memcheck.log | head -1
# shapes: "d batch seqlen_q seqlen_k heads heads_kv causal(0/1)"
SHAPES=("128 8 1 8192 32 8 0" "128 8 16 8192 32 8 1" "128 4 64 4096 32 4 1" "64 8 8 4096 32 8 1" "128 4 4096 4096 16 16 0")
: > $OUT/probe.jsonl
for round in 1 2 3 4 5 6 7 8; do
  [ $(( $(date +%s) - t0 )) -gt $(( LIMIT - 20 )) ] && break
  order=(base pack); [ $(( round % 2 )) -eq 0 ] && order=(pack base)
  for s in "${SHAPES[@]}"; do
    read -r d b sq sk h hk c <<< "$s"
    for t in "${order[@]}"; do
      mask=(); [ "$c" = 1 ] && mask=(--causal)
      j=$(timeout 20 .ab/$t/build-ab/flashattn run --backend cuda --algo fa3 --head-dim $d --batch $b --seqlen-q $sq \
            --seqlen-k $sk --heads $h --heads-kv $hk "${mask[@]}" --warmup-ms 200 --json 2>/dev/null | tail -n 1)
      echo "{\"round\": $round, \"tree\": \"$t\", \"run\": ${j:-null}}" >> $OUT/probe.jsonl
    done
  done
done
python3 - $OUT/probe.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    j = r["run"]
    if not j: continue
    p = j["problem"]
    key = (p["head_dim"], p["batch"], p["seqlen_q"], p["seqlen_k"], p["heads"], p["heads_kv"], p["causal"])
    by.setdefault(key, {}).setdefault(r["tree"], []).append((j["forward"]["ms"], j["pass"], j["kernel"]))
for key, t in by.items():
    med = {k: statistics.median(x[0] for x in v) for k, v in t.items()}
    ok = all(x[1] for v in t.values() for x in v)
    kern = {k: v[0][2] for k, v in t.items()}
    ratio = med.get("base", 0) / med["pack"] if med.get("pack") else 0
    print(f"d {key[0]} b {key[1]} sq {key[2]} sk {key[3]} h {key[4]}/{key[5]} causal {int(key[6])}: "
          f"base {med.get('base', 0)*1e3:.1f} us  pack {med.get('pack', 0)*1e3:.1f} us  speedup {ratio:.2f}  "
          f"rounds {len(t.get('pack', []))}  checks {'pass' if ok else 'FAIL'}  {kern.get('pack')}")
PY
echo "done at $(( $(date +%s) - t0 )) s"
