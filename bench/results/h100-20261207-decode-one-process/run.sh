#!/usr/bin/env bash
# Device call (~120 s): builds the Python extension (sm_90a) and runs bench/decode_ab.py on the four decode
# shapes, ours with the heuristic's split count and with 2 splits forced, against SDPA cuDNN in one process
# (30 rounds of 10 calls per side). Writes OUT/gpu.txt, OUT/decode_ab.txt, OUT/decode_ab.json, OUT/build.log.
# On the GPU machine: bash bench/results/h100-20261207-decode-one-process/run.sh $OUT
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
OUT=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
BUILD=$ROOT/build-decode-ab
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } |
  tee "$OUT/gpu.txt"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
  -DFLASHATTN_CUDA_ARCHITECTURES=90a -DFLASHATTN_BUILD_PYTHON=ON >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target _ext >>"$OUT/build.log" 2>&1 ||
  { tail -n 30 "$OUT/build.log"; exit 1; }
PY=$(mktemp -d)
EXT=$(find "$BUILD" -name '_ext*.so' -print -quit)
mkdir -p "$PY/flashattn" && cp "$ROOT"/python/flashattn/*.py "$EXT" "$PY/flashattn/"
PYTHONPATH=$PY${PYTHONPATH:+:$PYTHONPATH} python3 "$ROOT/bench/decode_ab.py" --splits "${SPLITS:-0,2}" \
  --rounds "${ROUNDS:-30}" --calls "${CALLS:-10}" --json "$OUT/decode_ab.json" 2>&1 | tee "$OUT/decode_ab.txt"
rm -rf "$PY"
