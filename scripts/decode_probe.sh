#!/usr/bin/env bash
# Rounds of `flashattn run --kv-cache` over the trees of an A/B (each tree's CLI in TREE/build-ab, as
# scripts/ab_build.sh leaves it), the trees in rotating order from round to round so that a drift of the
# clock favours none: the decode counterpart of scripts/fa3_probe.sh, for changes whose effect is a few
# microseconds of a call.
#
# Usage: bash scripts/decode_probe.sh OUTDIR NAME=TREE [NAME=TREE ...]
# Environment: DECODE_PROBE_CASES (cases separated by ';', each "name|flashattn run arguments"; default the
# benchmark's four shapes), DECODE_PROBE_ARGS (arguments of every run; default "--backend cuda --head-dim 128
# --heads 32 --heads-kv 8 --no-check-indices --repeat 100 --warmup-ms 200"), DECODE_PROBE_ROUNDS (default 8),
# DECODE_PROBE_UNTIL (epoch seconds: no round starts within 25 s of it; default none).
# Writes OUTDIR/probe.jsonl (one line per run: round, case, tree and the run's JSON) and OUTDIR/probe.txt
# (per case, each tree's median us and the first tree's median over it, whether every run's sampled rows
# passed, and the kernel), which it also prints.
set -uo pipefail

[ $# -ge 2 ] || { echo "usage: $0 OUTDIR NAME=TREE [NAME=TREE ...]" >&2; exit 2; }
OUT=$1
shift
names=() trees=()
for arg in "$@"; do
  names+=("${arg%%=*}")
  trees+=("${arg#*=}")
done
count=${#names[@]}
IFS=';' read -r -a cases <<<"${DECODE_PROBE_CASES:-1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072;16x8192|--batch 16 --cache-len 8192;64x4096|--batch 64 --cache-len 4096}"
read -r -a common <<<"${DECODE_PROBE_ARGS:---backend cuda --head-dim 128 --heads 32 --heads-kv 8 --no-check-indices --repeat 100 --warmup-ms 200}"
ROUNDS=${DECODE_PROBE_ROUNDS:-8}
UNTIL=${DECODE_PROBE_UNTIL:-0}
mkdir -p "$OUT"
: >"$OUT/probe.jsonl"

for ((round = 1; round <= ROUNDS; ++round)); do
  if [ "$UNTIL" -gt 0 ] && [ $(( UNTIL - $(date +%s) )) -le 25 ]; then
    echo "decode_probe: time is up after round $((round - 1))" >&2
    break
  fi
  for c in "${cases[@]}"; do
    read -r -a args <<<"${c#*|}"
    for ((k = 0; k < count; ++k)); do
      i=$(( (k + round - 1) % count ))
      j=$(timeout 30 "${trees[$i]}/build-ab/flashattn" run --kv-cache "${common[@]}" "${args[@]}" --json \
            2>/dev/null | tail -n 1)
      echo "{\"round\": $round, \"case\": \"${c%%|*}\", \"tree\": \"${names[$i]}\", \"run\": ${j:-null}}" \
        >>"$OUT/probe.jsonl"
    done
  done
done

python3 - "$OUT/probe.jsonl" "${names[@]}" <<'PY' | tee "$OUT/probe.txt"
import json, statistics, sys
names = sys.argv[2:]
by = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    j = r["run"]
    entry = by.setdefault(r["case"], {})
    if not j:
        entry.setdefault("failed", []).append(r["tree"])
        continue
    entry.setdefault(r["tree"], []).append((j["forward"]["ms"] * 1e3, j["pass"], j["kernel"]))
for case, t in by.items():
    med = {n: statistics.median(x[0] for x in t[n]) for n in names if n in t}
    first = med.get(names[0])
    cells = "  ".join(f"{n} {m:8.2f} us" + (f" ({first / m:.3f}x)" if first else "") for n, m in med.items())
    ok = all(x[1] for n in names for x in t.get(n, []))
    kernel = next((t[n][0][2] for n in names if n in t), "-")
    failed = f"  runs without a result: {len(t['failed'])}" if "failed" in t else ""
    print(f"{case:10s} {cells}  rounds {len(t.get(names[0], []))}  checks {'pass' if ok else 'FAIL'}  {kernel}{failed}")
PY
