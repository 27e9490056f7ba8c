#!/usr/bin/env bash
# One device call at commit 72b2f2d (no trees carried):
#   FLASHATTN_COMMIT=72b2f2d bash bench/results/gpu-20261205-decode-forward-route/run.sh $OUT
# The whole gpu_check (budget 420 s, so the sweep is skipped), then rounds of `flashattn run` (auto: the
# split-KV route) against `flashattn run --algo fa3` on forward calls of few query rows (LIMIT s, default 130).
set -uo pipefail
OUT=$1
t0=$(date +%s)
FLASHATTN_CHECK_BUDGET_S=420 bash scripts/gpu_check.sh $OUT > $OUT/gpu_check.log 2>&1
echo "gpu_check rc $? at $(( $(date +%s) - t0 )) s"
head -n 20 $OUT/summary.txt
LIMIT=${LIMIT:-130}
t1=$(date +%s)
B=build-gpu-check/flashattn
SHAPES=("128 8 1 8192 32 8 0" "128 1 1 32768 32 8 0" "128 1 1 131072 32 8 0" "128 64 1 4096 32 8 0"
        "128 16 1 4096 32 32 0" "128 8 4 8192 32 8 1" "64 8 8 4096 32 8 1" "128 8 16 8192 32 8 1" "128 4 8 4096 32 4 1")
: > $OUT/probe.jsonl
for round in 1 2 3 4; do
  [ $(( $(date +%s) - t1 )) -gt $(( LIMIT - 25 )) ] && break
  order=(auto fa3); [ $(( round % 2 )) -eq 0 ] && order=(fa3 auto)
  for s in "${SHAPES[@]}"; do
    read -r d b sq sk h hk c <<< "$s"
    for a in "${order[@]}"; do
      mask=(); [ "$c" = 1 ] && mask=(--causal)
      j=$(timeout 20 $B run --backend cuda --algo $a --head-dim $d --batch $b --seqlen-q $sq --seqlen-k $sk \
            --heads $h --heads-kv $hk "${mask[@]}" --warmup-ms 200 --json 2>/dev/null | tail -n 1)
      echo "{\"round\": $round, \"algo\": \"$a\", \"run\": ${j:-null}}" >> $OUT/probe.jsonl
    done
  done
done
python3 - $OUT/probe.jsonl <<'PY' | tee $OUT/probe.txt
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    j = r["run"]
    if not j: continue
    p = j["problem"]
    key = (p["head_dim"], p["batch"], p["seqlen_q"], p["seqlen_k"], p["heads"], p["heads_kv"], p["causal"])
    by.setdefault(key, {}).setdefault(r["algo"], []).append((j["forward"]["ms"], j["pass"], j["kernel"]))
for key, t in by.items():
    med = {k: statistics.median(x[0] for x in v) for k, v in t.items()}
    ok = all(x[1] for v in t.values() for x in v)
    kern = {k: v[0][2] for k, v in t.items()}
    ratio = med.get("fa3", 0) / med["auto"] if med.get("auto") else 0
    rows_kv = key[2] * key[4] // key[5]
    print(f"d {key[0]} b {key[1]} sq {key[2]} sk {key[3]} h {key[4]}/{key[5]} causal {int(key[6])} rows {rows_kv}: "
          f"fa3 {med.get('fa3', 0)*1e3:.1f} us  auto {med.get('auto', 0)*1e3:.1f} us  speedup {ratio:.2f}  "
          f"rounds {len(t.get('auto', []))}  checks {'pass' if ok else 'FAIL'}  {kern.get('fa3')} | {kern.get('auto')}")
PY
echo "done at $(( $(date +%s) - t0 )) s"
