#!/usr/bin/env bash
# Times the FA2 backward under variants of its source on one GPU, in one call, so that the variants are
# compared on the same machine (machine-to-machine spread on an H200 is several percent).
#
# Usage: bash scripts/fa2_bwd_variants.sh OUT_JSON VARIANT...
#   VARIANT is NAME=SPEC: SPEC is "base" (the tree as it is), "dir:PATH" (the files under PATH, laid over
#   src/cuda/sm80/, e.g. a copy of an older version) or a sed expression applied to
#   src/cuda/sm80/fa2_bwd_config.cuh. Each variant rebuilds the CLI (sm_90a only, in
#   $FLASHATTN_BUILD_DIR, default build-bwd-variants), runs `flashattn run --backward` on each shape with a
#   200 ms warm-up (sustained clock) and records the median backward time; the sources are restored after
#   every variant. Shapes: $FA2_BWD_SHAPES (";"-separated CLI options), default the papers' 16k-token sweep
#   at seqlen 4096 for head dims 64/128/256 plus causal d 128.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT_JSON=${1:?usage: fa2_bwd_variants.sh OUT_JSON NAME=SPEC...}
shift
BUILD=${FLASHATTN_BUILD_DIR:-$ROOT/build-bwd-variants}
SM80=$ROOT/src/cuda/sm80
CFG=$SM80/fa2_bwd_config.cuh
SHAPES=${FA2_BWD_SHAPES:-"--batch 4 --heads 32 --head-dim 64 --seqlen-q 4096;--batch 4 --heads 16 --head-dim 128 --seqlen-q 4096;--batch 4 --heads 16 --head-dim 128 --seqlen-q 4096 --causal;--batch 4 --heads 8 --head-dim 256 --seqlen-q 4096"}
SAVE=$(mktemp -d)
trap 'cp "$SAVE"/orig/* "$SM80"/ 2>/dev/null; rm -rf "$SAVE"' EXIT
mkdir -p "$SAVE/orig" && cp "$SM80"/* "$SAVE/orig/"

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
      -DFLASHATTN_CUDA_ARCHITECTURES=90a >"$SAVE/configure.log" 2>&1 ||
  { cat "$SAVE/configure.log"; exit 1; }

IFS=';' read -r -a shape_list <<<"$SHAPES"
echo "[" >"$OUT_JSON"
first=1
for v in "$@"; do
  name=${v%%=*} spec=${v#*=}
  cp "$SAVE"/orig/* "$SM80"/
  case "$spec" in
    base) ;;
    dir:*) cp "${spec#dir:}"/* "$SM80"/ ;;
    *) sed -i "$spec" "$CFG" ;;
  esac
  t0=$(date +%s)
  if ! cmake --build "$BUILD" -j "$(nproc)" --target flashattn_cli >"$SAVE/build.log" 2>&1; then
    echo "variant $name: build FAILED"; tail -20 "$SAVE/build.log"; continue
  fi
  echo "variant $name: built in $(( $(date +%s) - t0 )) s"
  for s in "${shape_list[@]}"; do
    # shellcheck disable=SC2086
    line=$("$BUILD/flashattn" run --algo fa2 --backward --warmup-ms 200 --repeat 30 --seed 1 --json $s 2>/dev/null)
    rc=$?
    [ $first -eq 1 ] || echo "," >>"$OUT_JSON"
    first=0
    # One record per run into the JSON; its summary (ms, TFLOP/s, reduced-copy check) on stdout.
    python3 - "$name" "$spec" "$line" "$s" "$rc" "$OUT_JSON" <<'PY'
import json, sys
name, spec, line, shape, rc, out = sys.argv[1:]
d = json.loads(line) if line else {}
bwd = d.get("backward")
check = d.get("backward_check", {}).get("status")
with open(out, "a") as f:
    f.write(json.dumps({"variant": name, "spec": spec, "shape": shape, "rc": int(rc), "backward": bwd,
                        "backward_kernel": d.get("backward_kernel"), "check": check}) + "\n")
summary = f"{bwd['ms']} {bwd['tflops']} {check}" if bwd else "no result"
print(f"  {shape:<60} {summary} (rc {rc})")
PY
  done
done
echo "]" >>"$OUT_JSON"
