#!/usr/bin/env bash
# One device call that times a change to the fa3 forward kernels against the shipped kernels in one process:
# the change is written as code that only the candidate form takes (Fa3Config::kCandidate), so one build with
# FLASHATTN_FA3_CANDIDATE=ON holds both forms, and bench/candidate_ab.py alternates them call round by call
# round on the same inputs (where two programs, one per tree, each meet the GPU's clock as they find it).
# Steps: configure and build (sm_90a, the CLI, the GPU tests, the Python extension); the fa3 GPU tests on the
# candidate form (FLASHATTN_FA3_CANDIDATE=1), memcheck and racecheck of Fa3Forward.SmallShapes on it; the
# ptxas summary (scripts/ptxas_summary.sh: both forms' kernels); then bench/candidate_ab.py on the shapes.
# A shape whose kernels the change does not touch times the same kernel twice: its ratio shows what the
# method reads for no change.
#
# Usage: bash scripts/fa3_candidate_ab.sh OUT
# Environment: CAND_PATCH (a patch that writes the candidate form, applied to this checkout first: a change
# prepared against a commit and run on a copy of it), CAND_SHAPES (d:N:causal comma list, default
# bench/candidate_ab.py's), CAND_ROUNDS (default 20), CAND_CALLS (default 10), CAND_TESTS=0 (no tests and
# sanitizers), JOBS (default the CPU count).
# Writes OUT/gpu.txt, OUT/checks.txt, OUT/ab.txt, OUT/ab.json and OUT/logs.tar.gz; the build goes to
# build-cand in the repository.
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
OUT=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=$ROOT/build-cand
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }
if [ -n "${CAND_PATCH:-}" ]; then
  if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$ROOT" apply "$(realpath "$CAND_PATCH")" || { echo "CAND_PATCH does not apply" >&2; exit 1; }
  else
    patch -d "$ROOT" -p1 -N -s <"$CAND_PATCH" || { echo "CAND_PATCH does not apply" >&2; exit 1; }
  fi
fi
mkdir -p "$OUT/logs"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } |
  tee "$OUT/gpu.txt"

log=$OUT/logs/build.log
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
  -DFLASHATTN_CUDA_ARCHITECTURES=90a -DFLASHATTN_FA3_CANDIDATE=ON -DFLASHATTN_BUILD_PYTHON=ON >"$log" 2>&1 &&
  cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target flashattn_cli flashattn_tests_gpu _ext >>"$log" 2>&1
rc=$?
echo "build rc $rc after $(elapsed)"
checks=$OUT/checks.txt
echo "build rc $rc" >"$checks"
if [ $rc -ne 0 ]; then
  tail -n 30 "$log"
  tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
  exit 1
fi

if [ "${CAND_TESTS:-1}" != 0 ]; then
  FLASHATTN_FA3_CANDIDATE=1 bash "$HERE/fa3_gpu_checks.sh" "$BUILD/tests/flashattn_tests_gpu" "$OUT/logs" \
    "$checks" candidate
  echo "checked after $(elapsed)"
fi
bash "$HERE/ptxas_summary.sh" "$log" >>"$checks"

PY=$(mktemp -d)
EXT=$(find "$BUILD" -name '_ext*.so' -print -quit)
mkdir -p "$PY/flashattn" && cp "$ROOT"/python/flashattn/*.py "$EXT" "$PY/flashattn/"
shapes=()
[ -n "${CAND_SHAPES:-}" ] && shapes=(--shapes "$CAND_SHAPES")
PYTHONPATH=$PY${PYTHONPATH:+:$PYTHONPATH} python3 "$ROOT/bench/candidate_ab.py" "${shapes[@]}" \
  --rounds "${CAND_ROUNDS:-20}" --calls "${CAND_CALLS:-10}" --json "$OUT/ab.json" 2>&1 | tee "$OUT/ab.txt"
rm -rf "$PY"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
echo "done after $(elapsed)"
