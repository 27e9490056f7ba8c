#!/usr/bin/env bash
# One device call (the tree made beforehand and carried: .ab/fp):
#   bash scripts/ab_trees.sh .ab fp=bench/results/gpu-20261205-decode-route-few-pairs/few-pairs.patch
#   then on the GPU machine: bash bench/results/gpu-20261205-decode-route-few-pairs/run.sh $OUT
# Builds the patched tree (sm_90a), runs the decode-route GPU tests, then rounds of `flashattn run` auto
# against --algo fa3 (LIMIT s of probing, default 80).
set -uo pipefail
OUT=$1; t0=$(date +%s); T=.ab/fp
cmake -S $T -B $T/build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHITECTURES=90a > $OUT/build.log 2>&1 &&
  cmake --build $T/build-ab -j 16 --target flashattn_cli flashattn_tests_gpu >> $OUT/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"
timeout 60 $T/build-ab/tests/flashattn_tests_gpu --gtest_filter='DecodeGpuForward.*:Fa3Forward.AutoPicksFa3WhereItRuns' > $OUT/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' $OUT/tests.log | head
LIMIT=${LIMIT:-80}; t1=$(date +%s)
SHAPES=("128 4 8 4096 32 4 1" "128 2 8 8192 32 8 0" "128 1 16 32768 32 8 0" "128 4 16 4096 32 8 1" "64 2 16 8192 16 4 1" "128 8 8 8192 32 8 1")
: > $OUT/probe.jsonl
for round in 1 2 3 4; do
  [ $(( $(date +%s) - t1 )) -gt $(( LIMIT - 20 )) ] && break
  order=(auto fa3); [ $(( round % 2 )) -eq 0 ] && order=(fa3 auto)
  for s in "${SHAPES[@]}"; do
    read -r d b sq sk h hk c <<< "$s"; mask=(); [ "$c" = 1 ] && mask=(--causal)
    for a in "${order[@]}"; do
      j=$(timeout 20 $T/build-ab/flashattn run --backend cuda --algo $a --head-dim $d --batch $b --seqlen-q $sq \
            --seqlen-k $sk --heads $h --heads-kv $hk "${mask[@]}" --warmup-ms 200 --json 2>/dev/null | tail -n 1)
      echo "{\"round\": $round, \"algo\": \"$a\", \"run\": ${j:-null}}" >> $OUT/probe.jsonl
    done
  done
done
python3 - $OUT/probe.jsonl <<'PY' | tee $OUT/probe.txt
import json, statistics, sys
by = {}
for l in open(sys.argv[1]):
    r = json.loads(l); j = r["run"]
    if not j: continue
    p = j["problem"]
    key = (p["head_dim"], p["batch"], p["seqlen_q"], p["seqlen_k"], p["heads"], p["heads_kv"], p["causal"])
    by.setdefault(key, {}).setdefault(r["algo"], []).append((j["forward"]["ms"], j["pass"], j["kernel"]))
for key, t in by.items():
    med = {k: statistics.median(x[0] for x in v) for k, v in t.items()}
    ok = all(x[1] for v in t.values() for x in v)
    ratio = med.get("fa3", 0) / med["auto"] if med.get("auto") else 0
    print(f"d {key[0]} b {key[1]} sq {key[2]} sk {key[3]} h {key[4]}/{key[5]} causal {int(key[6])} rows {key[2]*key[4]//key[5]} "
          f"pairs {key[1]*key[5]}: fa3 {med.get('fa3', 0)*1e3:.1f} us  auto {med.get('auto', 0)*1e3:.1f} us  "
          f"speedup {ratio:.2f}  rounds {len(t.get('auto', []))}  checks {'pass' if ok else 'FAIL'}  auto: {t['auto'][0][2] if 'auto' in t else '-'}")
PY
echo "done at $(( $(date +%s) - t0 )) s"
