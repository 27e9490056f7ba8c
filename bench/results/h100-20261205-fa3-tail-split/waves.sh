#!/usr/bin/env bash
# The last-wave probe: fa3 non-causal on tile counts that fill the last wave of a persistent grid (one CTA
# per SM, 132 SMs) to different degrees, for each build given, two passes in alternating order.
# Usage: bash waves.sh OUT NAME=CLI [NAME=CLI ...]   (CLI: a build's `flashattn`). Writes OUT/waves.jsonl
# (one `flashattn run --json` per line, with pass, build and shape) and prints TFLOP/s per shape and build.
# Shapes: head dims 128 and 256 at N 8192, batch 1, 31 / 32 / 33 heads (1984 / 2048 / 2112 tiles of 128 rows:
# 15.03 / 15.52 / 16.00 waves); head dim 128 at N 512, 16 heads, batch 32 against 33 (2048 / 2112 tiles).
set -uo pipefail
OUT=$1
shift
names=() clis=()
for spec in "$@"; do names+=("${spec%%=*}"); clis+=("${spec#*=}"); done
shapes=("128 8192 1 31" "128 8192 1 32" "128 8192 1 33" "128 512 32 16" "128 512 33 16"
        "256 8192 1 31" "256 8192 1 32" "256 8192 1 33")
for pass in 1 2; do
  order=$(seq 0 $(( ${#names[@]} - 1 )))
  [ $pass -eq 2 ] && order=$(echo "$order" | tac)
  for i in $order; do
    for shape in "${shapes[@]}"; do
      read -r d n b h <<<"$shape"
      run=$("${clis[$i]}" run --backend cuda --algo fa3 --head-dim $d --seqlen-q $n --batch $b --heads $h \
        --warmup-ms 300 --repeat 30 --samples 4 --json 2>/dev/null) || run=null
      echo "{\"pass\": $pass, \"build\": \"${names[$i]}\", \"shape\": \"d$d n$n b$b h$h\", \"run\": ${run:-null}}" >>"$OUT/waves.jsonl"
    done
  done
done
python3 - "$OUT/waves.jsonl" <<'PY'
import json, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    run = r["run"] or {}
    ok = run.get("pass") is True
    rows[(r["shape"], r["build"])].append((run.get("forward") or {}).get("tflops") if ok else None)
for (shape, build), v in rows.items():
    print(f"{shape:22s} {build:8s} " + " ".join("FAILED" if x is None else f"{x:7.1f}" for x in v))
PY
