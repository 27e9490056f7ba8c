#!/usr/bin/env bash
# Prepared call: the split merge's ticket with one fence or one acq_rel atomic in thread 0 after the barrier,
# instead of a sequentially consistent fence in every thread before it and after it. Trees made beforehand
# and carried (.ab/dbase, .ab/acqrel, .ab/onefence):
#   D=bench/results/gpu-20261206-decode-ticket
#   AB_COMMIT=9a773ff bash scripts/ab_trees.sh .ab dbase acqrel=$D/ticket-acq-rel.patch onefence=$D/ticket-one-fence.patch
#   then on the GPU machine: bash bench/results/gpu-20261206-decode-ticket/run.sh $OUT
# Builds the three trees' CLIs and GPU tests (sm_90a; scripts/ab_build.sh), runs the decode GPU tests on the two
# patched ones, then times KV-cache calls (trusted indices) in alternating rounds, LIMIT s in all (default 330).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-330}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
bash scripts/ab_build.sh $OUT "flashattn_cli flashattn_tests_gpu" .ab/dbase .ab/acqrel .ab/onefence
for t in acqrel onefence; do
  timeout 150 .ab/$t/build-ab/tests/flashattn_tests_gpu --gtest_filter='*DecodeGpu*:*KvCache*Gpu*' > $OUT/tests-$t.log 2>&1
  echo "tests $t rc $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests-$t.log | tr '\n' ' ')"
done
CASES=("1x32768|--batch 1 --cache-len 32768" "1x131072|--batch 1 --cache-len 131072"
       "4x8192|--batch 4 --cache-len 8192" "16x8192|--batch 16 --cache-len 8192" "64x4096|--batch 64 --cache-len 4096")
: > $OUT/probe.jsonl
for round in 1 2 3 4 5 6 7 8; do
  [ $(( $(date +%s) - t0 )) -gt $(( LIMIT - 25 )) ] && break
  order=(dbase acqrel onefence); [ $(( round % 3 )) -eq 1 ] && order=(acqrel onefence dbase)
  [ $(( round % 3 )) -eq 2 ] && order=(onefence dbase acqrel)
  for c in "${CASES[@]}"; do
    for t in "${order[@]}"; do
      j=$(timeout 30 .ab/$t/build-ab/flashattn run --kv-cache --backend cuda --head-dim 128 --heads 32 --heads-kv 8 \
            ${c#*|} --no-check-indices --repeat 100 --warmup-ms 200 --json 2>/dev/null | tail -n 1)
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
    b = med.get("dbase", float("nan"))
    print(f"{case:9s} " + "  ".join(f"{k} {m:8.2f} us ({b / m:.3f}x)" for k, m in med.items()) +
          f"  rounds {len(t.get('dbase', []))}  checks {'pass' if ok else 'FAIL'}  {t['dbase'][0][2] if 'dbase' in t else '-'}")
PY
for t in dbase acqrel onefence; do gzip -9 $OUT/build-$t.log; done
echo "done at $(( $(date +%s) - t0 )) s"
