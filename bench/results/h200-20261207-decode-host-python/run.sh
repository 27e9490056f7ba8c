#!/usr/bin/env bash
# Device call (~150 s): builds the Python extension (sm_90a) and runs probe.py (host time of a Python decode
# call, its parts, SDPA cuDNN's, and a torch.profiler table). Writes OUT/probe.txt, OUT/probe.json, OUT/gpu.txt,
# OUT/build.log and OUT/trace.tar.gz.
# On the GPU machine: bash bench/results/h200-20261207-decode-host-python/run.sh $OUT
# base/ holds be5716c's __init__.py and _torch.py beside the shim _ext.py; they are not kept here (they are in
# git), so make them before the call:
#   D=bench/results/h200-20261207-decode-host-python
#   for f in __init__.py _torch.py; do git show be5716c:python/flashattn/$f > $D/base/$f; done
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
OUT=$1
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$D/../../.." && pwd)
BUILD=$ROOT/build-decode-ab
mkdir -p "$OUT"
for f in __init__.py _torch.py; do
  [ -f "$D/base/$f" ] || { echo "no $D/base/$f: make it from be5716c (see the header)" >&2; exit 2; }
done
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } |
  tee "$OUT/gpu.txt"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
  -DFLASHATTN_CUDA_ARCHITECTURES=90a -DFLASHATTN_BUILD_PYTHON=ON >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target _ext >>"$OUT/build.log" 2>&1 ||
  { tail -n 30 "$OUT/build.log"; exit 1; }
PY=$(mktemp -d)
EXT=$(find "$BUILD" -name '_ext*.so' -print -quit)
mkdir -p "$PY/flashattn" && cp "$ROOT"/python/flashattn/*.py "$EXT" "$PY/flashattn/"
mkdir -p "$PY/flashattn_base" && cp "$ROOT"/python/flashattn/*.py "$PY/flashattn_base/" && cp "$D"/base/*.py "$PY/flashattn_base/"
PYTHONPATH=$PY${PYTHONPATH:+:$PYTHONPATH} python3 "$D/probe.py" "$OUT" 2>&1 | tail -n 80
tar -czf "$OUT/trace.tar.gz" -C "$OUT" trace_wrapper_1x32768.json && rm -f "$OUT/trace_wrapper_1x32768.json"
rm -rf "$PY"
