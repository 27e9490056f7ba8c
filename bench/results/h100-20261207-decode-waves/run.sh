#!/usr/bin/env bash
# Device call: the decode kernels' TB/s against the grid's fill (predictions.txt). One tree, made beforehand
# and carried (.ab/dbase: AB_COMMIT=2a8f1a9 bash scripts/ab_trees.sh .ab
#   dbase=bench/results/h100-20261207-decode-rescale/test.patch), built by scripts/ab_build.sh, timed by
# scripts/decode_probe.sh (each case's rounds rotate; one tree, so the cases are what is compared).
#   bash bench/results/h100-20261207-decode-waves/run.sh $OUT   (timeout_s 400)
set -uo pipefail
OUT=$1
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
bash scripts/ab_build.sh "$OUT" "flashattn_cli" .ab/dbase >"$OUT/build.txt" 2>&1
tail -3 "$OUT/build.txt"
c="b32|--batch 32 --cache-len 4096 --heads 32 --heads-kv 8;b33|--batch 33 --cache-len 4096 --heads 32 --heads-kv 8"
c+=";b64|--batch 64 --cache-len 4096 --heads 32 --heads-kv 8;b66|--batch 66 --cache-len 4096 --heads 32 --heads-kv 8"
c+=";t128|--batch 4 --cache-len 8192 --heads 128 --heads-kv 32;t132|--batch 4 --cache-len 8192 --heads 132 --heads-kv 33"
c+=";s128|--batch 1 --cache-len 32768 --heads 128 --heads-kv 32 --splits 4"
c+=";s132|--batch 1 --cache-len 32768 --heads 132 --heads-kv 33 --splits 4"
c+=";16x8192|--batch 16 --cache-len 8192 --heads 32 --heads-kv 8"
DECODE_PROBE_CASES=$c DECODE_PROBE_ROUNDS=${ROUNDS:-8} DECODE_PROBE_UNTIL=$(( $(date +%s) + ${LIMIT:-300} )) \
  DECODE_PROBE_ARGS="--backend cuda --head-dim 128 --no-check-indices --repeat 100 --warmup-ms 200" \
  bash scripts/decode_probe.sh "$OUT" dbase=.ab/dbase >/dev/null
python3 - "$OUT/probe.jsonl" <<'PY' | tee "$OUT/waves.txt"
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["run"]:
        runs.setdefault(r["case"], []).append(r["run"])
for case, rs in runs.items():
    us = statistics.median(x["forward"]["ms"] * 1e3 for x in rs)
    tbps = rs[0]["forward"]["kv_bytes"] / (us * 1e-6) / 1e12
    print(f"{case:8s} {us:9.2f} us  {tbps:5.3f} TB/s  rounds {len(rs)}  {rs[0]['kernel']}")
PY
