#!/usr/bin/env bash
# One device call (trees made beforehand and carried: .ab/base at bfeba6b, .ab/head at the head):
#   AB_COMMIT=bfeba6b bash scripts/ab_trees.sh .ab base && bash scripts/ab_trees.sh .ab head
#   then on the GPU machine: bash bench/results/h200-20261206-decode-host-cost/run.sh $OUT
# Builds the CLI of both trees (sm_90a) and times short KV-cache and routed forward calls, the trees alternating
# (LIMIT s in all, default 200): the host cost of planning a decode call twice since 2b22801.
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-200}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for t in base head; do
  ( cmake -S .ab/$t -B .ab/$t/build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
      -DFLASHATTN_CUDA_ARCHITECTURES=90a > $OUT/build-$t.log 2>&1 &&
    cmake --build .ab/$t/build-ab -j 8 --target flashattn_cli >> $OUT/build-$t.log 2>&1; echo "build $t rc $?" ) &
done
wait
echo "built at $(( $(date +%s) - t0 )) s"
# name | flashattn run arguments
CASES=("kv 1x1024 checked|--kv-cache --batch 1 --cache-len 1024"
       "kv 1x1024 trusted|--kv-cache --batch 1 --cache-len 1024 --no-check-indices"
       "kv 1x4096 trusted|--kv-cache --batch 1 --cache-len 4096 --no-check-indices"
       "fwd route 1x4096|--batch 1 --seqlen-q 1 --seqlen-k 4096"
       "kv 8x8192 trusted|--kv-cache --batch 8 --cache-len 8192 --no-check-indices")
: > $OUT/probe.jsonl
for round in 1 2 3 4 5 6 7 8; do
  [ $(( $(date +%s) - t0 )) -gt $(( LIMIT - 20 )) ] && break
  order=(base head); [ $(( round % 2 )) -eq 0 ] && order=(head base)
  for c in "${CASES[@]}"; do
    for t in "${order[@]}"; do
      j=$(timeout 20 .ab/$t/build-ab/flashattn run --backend cuda --head-dim 128 --heads 32 --heads-kv 8 ${c#*|} \
            --repeat 200 --warmup-ms 200 --json 2>/dev/null | tail -n 1)
      echo "{\"round\": $round, \"case\": \"${c%%|*}\", \"tree\": \"$t\", \"run\": ${j:-null}}" >> $OUT/probe.jsonl
    done
  done
done
python3 - $OUT/probe.jsonl <<'PY' | tee $OUT/probe.txt
import json, statistics, sys
by = {}
for l in open(sys.argv[1]):
    r = json.loads(l); j = r["run"]
    if not j: continue
    by.setdefault(r["case"], {}).setdefault(r["tree"], []).append((j["forward"]["ms"], j["pass"], j["kernel"]))
for case, t in by.items():
    med = {k: statistics.median(x[0] for x in v) * 1e3 for k, v in t.items()}
    ok = all(x[1] for v in t.values() for x in v)
    print(f"{case:20s} base {med.get('base', 0):7.2f} us  head {med.get('head', 0):7.2f} us  "
          f"base/head {med.get('base', 0) / med['head'] if med.get('head') else 0:.3f}  rounds {len(t.get('head', []))}  "
          f"checks {'pass' if ok else 'FAIL'}  {t['head'][0][2] if 'head' in t else '-'}")
PY
echo "done at $(( $(date +%s) - t0 )) s"
