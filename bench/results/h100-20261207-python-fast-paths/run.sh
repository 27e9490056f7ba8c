#!/usr/bin/env bash
# Device call (~200 s): builds the Python extension (sm_90a), runs pytest over tests/python (the GPU tests
# included) and the decode host probe of bench/results/h200-20261207-decode-host-python (its `func` forms
# time flash_attn_func, changed since, against be5716c's package). Writes OUT/pytest.log, OUT/probe.txt,
# OUT/probe.json, OUT/gpu.txt, OUT/build.log.gz.
# On the GPU machine: bash bench/results/h100-20261207-python-fast-paths/run.sh $OUT
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
OUT=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
PROBE=$ROOT/bench/results/h200-20261207-decode-host-python
BUILD=$ROOT/build-py
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } |
  tee "$OUT/gpu.txt"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
  -DFLASHATTN_CUDA_ARCHITECTURES=90a -DFLASHATTN_BUILD_PYTHON=ON >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target _ext >>"$OUT/build.log" 2>&1 ||
  { tail -n 30 "$OUT/build.log"; gzip -f "$OUT/build.log"; exit 1; }
gzip -f "$OUT/build.log"
PY=$(mktemp -d)
EXT=$(find "$BUILD" -name '_ext*.so' -print -quit)
mkdir -p "$PY/flashattn" "$PY/flashattn_base"
cp "$ROOT"/python/flashattn/*.py "$EXT" "$PY/flashattn/"
cp "$ROOT"/python/flashattn/*.py "$PY/flashattn_base/" && cp "$PROBE"/base/*.py "$PY/flashattn_base/"
PYTHONPATH=$PY${PYTHONPATH:+:$PYTHONPATH} python3 -m pytest -q "$ROOT/tests/python" -p no:cacheprovider -rs \
  >"$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -n 5 "$OUT/pytest.log"
PYTHONPATH=$PY${PYTHONPATH:+:$PYTHONPATH} python3 "$PROBE/probe.py" "$OUT" 2>&1 | grep -v -i warn | head -n 16
rm -f "$OUT"/trace_*.json
rm -rf "$PY"
