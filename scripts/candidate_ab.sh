#!/usr/bin/env bash
# One device call that times a change to the fa3 forward kernels (CAND_ALGO=fa3, the default) or to the fa2
# forward or backward kernels (CAND_ALGO=fa2, CAND_BACKWARD=1 for the backward's dK/dV kernel) against the
# shipped kernels in one process: the change is written as code that only the candidate form takes
# (Cfg::kCandidate, src/cuda/common/candidate.h), so one build with FLASHATTN_FA3_CANDIDATE=ON (or
# FLASHATTN_FA2_CANDIDATE=ON) holds both forms, and bench/candidate_ab.py alternates them call round by call
# round on the same inputs (where two programs, one per tree, each meet the GPU's clock as they find it).
# Steps: configure and build (sm_90a, the CLI, the GPU tests, the Python extension); the family's GPU tests on
# the candidate form (FLASHATTN_<ALGO>_CANDIDATE=1) and memcheck and racecheck of a few small cases
# (scripts/tree_gpu_checks.sh; fa3: Fa3Forward.SmallShapes, fa2: a small backward case and a causal forward
# test); the ptxas summary (scripts/ptxas_summary.sh: both forms' kernels); then bench/candidate_ab.py on the
# shapes. A shape whose kernels the change does not touch times the same kernel twice: its ratio shows what the
# method reads for no change.
#
# Usage: bash scripts/candidate_ab.sh OUT
# Environment: CAND_ALGO (fa3 or fa2), CAND_BACKWARD=1 (fa2 only; CAND_BACKWARD=both times the forward, then
# the backward), CAND_PATCH (patches that write the candidate form, space-separated, applied to this checkout
# first in that order: changes prepared against a commit and run on a copy of it; several at once where they
# change disjoint kernels), CAND_SHAPES (d:N:causal comma list, default
# bench/candidate_ab.py's; CAND_SHAPES_BWD for the backward where both run), CAND_ROUNDS (default 20),
# CAND_CALLS (default 10), CAND_TESTS=0 (no tests and sanitizers), JOBS (default the CPU count).
# Writes OUT/gpu.txt, OUT/checks.txt, OUT/ab.txt, OUT/ab.json (ab-fwd.json and ab-bwd.json where both run) and
# OUT/logs.tar.gz; the build goes to build-cand in the repository.
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
OUT=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=$ROOT/build-cand
ALGO=${CAND_ALGO:-fa3}
case $ALGO in
  # The tests that name the shipped kernel exactly (Fa3Forward.SoftcapKernels; for fa2 RefusesWhatIsNotBuilt
  # and Fa2BackwardSupport) are left out: the candidate's kernel names end in "_candidate".
  fa3) tests_filter='Fa3*:*/fa3:-*SoftcapKernels*' sanitize='Fa3Forward.SmallShapes' ;;
  fa2) tests_filter='*Fa2Backward*:*/fa2:-*RefusesWhatIsNotBuilt*:*Fa2BackwardSupport*'
       sanitize='*Fa2Backward*bf16_sq17_sk17_causal*:*GpuForward.CausalWithRowsThatSeeNoKey/fa2' ;;
  *) echo "CAND_ALGO must be fa3 or fa2" >&2; exit 2 ;;
esac
ENV_NAME=FLASHATTN_${ALGO^^}_CANDIDATE
fa2_form=OFF fa3_form=OFF
[ "$ALGO" = fa2 ] && fa2_form=ON || fa3_form=ON
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }
for patch_file in ${CAND_PATCH:-}; do
  if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$ROOT" apply "$(realpath "$patch_file")" || { echo "CAND_PATCH $patch_file does not apply" >&2; exit 1; }
  else
    patch -d "$ROOT" -p1 -N -s <"$patch_file" || { echo "CAND_PATCH $patch_file does not apply" >&2; exit 1; }
  fi
done
mkdir -p "$OUT/logs"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } |
  tee "$OUT/gpu.txt"

log=$OUT/logs/build.log
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
  -DFLASHATTN_CUDA_ARCHITECTURES=90a -DFLASHATTN_FA2_CANDIDATE=$fa2_form \
  -DFLASHATTN_FA3_CANDIDATE=$fa3_form -DFLASHATTN_BUILD_PYTHON=ON >"$log" 2>&1 &&
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
  env "$ENV_NAME"=1 CHECK_TESTS="$tests_filter" CHECK_SANITIZE="$sanitize" bash "$HERE/tree_gpu_checks.sh" \
    "$BUILD/tests/flashattn_tests_gpu" "$OUT/logs" "$checks" candidate
  echo "checked after $(elapsed)"
fi
bash "$HERE/ptxas_summary.sh" "$log" >>"$checks"

PY=$(mktemp -d)
EXT=$(find "$BUILD" -name '_ext*.so' -print -quit)
mkdir -p "$PY/flashattn" && cp "$ROOT"/python/flashattn/*.py "$EXT" "$PY/flashattn/"
case ${CAND_BACKWARD:-0} in
  1) dirs=(bwd) ;;
  both) dirs=(fwd bwd) ;;
  *) dirs=(fwd) ;;
esac
: >"$OUT/ab.txt"
for dir in "${dirs[@]}"; do
  ab_args=(--algo "$ALGO")
  shapes=${CAND_SHAPES:-}
  if [ "$dir" = bwd ]; then
    ab_args+=(--backward)
    shapes=${CAND_SHAPES_BWD:-$shapes}
  fi
  [ -n "$shapes" ] && ab_args+=(--shapes "$shapes")
  json=$OUT/ab.json
  [ ${#dirs[@]} -gt 1 ] && json=$OUT/ab-$dir.json
  PYTHONPATH=$PY${PYTHONPATH:+:$PYTHONPATH} python3 "$ROOT/bench/candidate_ab.py" "${ab_args[@]}" \
    --rounds "${CAND_ROUNDS:-20}" --calls "${CAND_CALLS:-10}" --json "$json" 2>&1 | tee -a "$OUT/ab.txt"
done
rm -rf "$PY"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
echo "done after $(elapsed)"
