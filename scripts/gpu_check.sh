#!/usr/bin/env bash
# Build and check flashattn on a machine with an NVIDIA GPU, in one call:
#   configure (FLASHATTN_CUDA_ARCHITECTURES, default "80;90a") and build with every core, keeping the full
#   build log (it holds the -Xptxas -v register and spill report) and a per-kernel spill table;
#   ctest -L gpu and -L cli, with pytest of tests/python beside them when the Python extension can be built;
#   compute-sanitizer memcheck and racecheck on a few small GPU tests; SASS of the attention kernels with
#   their HMMA/HGMMA counts; the benchmark (`flashattn bench --gpu`, PyTorch SDPA peers, merged); fa3 and
#   fa2 against cuDNN and flash in one process with alternating rounds (bench/interleaved.py --quick); the
#   decode tests and bandwidth benchmark with the SDPA peers, and ours against cuDNN in one process
#   (bench/decode_ab.py).
#
# Usage: bash scripts/gpu_check.sh [results-dir]        (default bench/results/gpu-<UTC date>)
# Writes at most eight files there: build.log, tests.log, sanitizer.log, sass_summary.txt, bench.json,
# ablation.json (the fa3 ablation), decode.json (KV-cache bandwidth), summary.txt; the summary table is
# printed last. Without nvcc or a GPU it prints "skipped" and exits 0.
#
# Environment: FLASHATTN_CUDA_ARCHITECTURES, FLASHATTN_BUILD_DIR (default build-gpu-check), JOBS,
# FLASHATTN_BENCH=paper|quick|full|off (default paper: fa3 and fa2 on the papers' whole sweep, fa1 and
# standard on the quick subset; quick: everything on the subset; full: everything on the whole sweep),
# FLASHATTN_SANITIZER_FILTER, FLASHATTN_RACECHECK_FILTER, FLASHATTN_FA3_SANITIZER_FILTER (fa3 tests run
# under both tools),
# FLASHATTN_COMMIT (recorded in the results; taken from git when unset, with "+dirty" appended when the
# tracked files differ from that commit: set it where the checkout's git metadata may not match the tree, to
# the commit itself, not to what git says there; the summary's first line also gives the sources' digest,
# scripts/source_digest.sh, which any checkout of the commit reproduces),
# FLASHATTN_CHECK_BUDGET_S (seconds the whole check may take, 0 = no limit: the steps after the tests, i.e.
# sanitizers, benchmark, interleaved and decode, are skipped with a "skipped" row when the time left is
# below what they usually take on an H200; use it where the call is killed at a fixed limit).
# summary.txt is rewritten after every step, so a check killed part way still leaves the steps it finished.
# The summary ends with the fa3/fa2 table and the decode table, each beside the peers and ceilings, the
# interleaved tables and the performance targets read off the run (bench/targets.py; a report, never a failure).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
START=$(date +%s)

skip() {
  echo "gpu_check: skipped: $1"
  exit 0
}

if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  else
    skip "no CUDA compiler (nvcc) on PATH or in /usr/local/cuda/bin"
  fi
fi
command -v nvidia-smi >/dev/null 2>&1 || skip "nvidia-smi not found: no NVIDIA driver on this machine"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$GPU_NAME" ] || skip "nvidia-smi lists no GPU"

OUT=${1:-$ROOT/bench/results/gpu-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" || { echo "gpu_check: cannot create $OUT" >&2; exit 1; }
OUT=$(cd "$OUT" && pwd)
BUILD=${FLASHATTN_BUILD_DIR:-$ROOT/build-gpu-check}
ARCHS=${FLASHATTN_CUDA_ARCHITECTURES:-80;90a}
JOBS=${JOBS:-$(nproc)}
BENCH_MODE=${FLASHATTN_BENCH:-paper}
SAN_FILTER=${FLASHATTN_SANITIZER_FILTER:-*bf16_sq17_sk17_causal*:*bf16_varlen_empty_seqs_causal*:DecodeGpuTrusted.BadIndices*}
RACE_FILTER=${FLASHATTN_RACECHECK_FILTER:-*bf16_sq17_sk17_causal*}
FA3_SAN_FILTER=${FLASHATTN_FA3_SANITIZER_FILTER:-Fa3Forward.SmallShapes}  # skips itself off compute capability 9.0
SAN_TIMEOUT=240
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
touch "$TMP/start"

if [ -z "${FLASHATTN_COMMIT:-}" ] && git -C "$ROOT" rev-parse HEAD >/dev/null 2>&1; then
  FLASHATTN_COMMIT=$(git -C "$ROOT" rev-parse HEAD)
  # A tree whose tracked files differ from that commit (local edits, or a copy of a newer tree beside older
  # git metadata) is not that commit: say so in every result.
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || FLASHATTN_COMMIT=$FLASHATTN_COMMIT+dirty
fi
export FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-unknown}
# The sources' digest (scripts/source_digest.sh): ties the results to a tree whatever the git metadata says.
SOURCE_DIGEST=$(bash "$ROOT/scripts/source_digest.sh" "$ROOT" 2>/dev/null || echo unknown)

BUILD_LOG=$OUT/build.log TESTS_LOG=$OUT/tests.log SAN_LOG=$OUT/sanitizer.log
SASS=$OUT/sass_summary.txt BENCH_JSON=$OUT/bench.json SUMMARY=$OUT/summary.txt
: >"$BUILD_LOG"; : >"$TESTS_LOG"; : >"$SAN_LOG"; : >"$SASS"; : >"$SUMMARY"
BUDGET=${FLASHATTN_CHECK_BUDGET_S:-0}
case $BUDGET in ''|*[!0-9]*) echo "gpu_check: FLASHATTN_CHECK_BUDGET_S must be a whole number of seconds" >&2; exit 2 ;; esac
declare -a ROWS=()
write_summary() {
  {
    echo "gpu_check: $GPU_NAME; commit $FLASHATTN_COMMIT; sources $SOURCE_DIGEST; archs $ARCHS;" \
         "$(date -u +%Y-%m-%dT%H:%M:%SZ);" \
         "total $(elapsed "$START")${1:+; $1}"
    printf '%-20s %-8s %s\n' step status detail
    printf '%s\n' "${ROWS[@]}"
    if [ -f "$TMP/compare.txt" ]; then echo; cat "$TMP/compare.txt"; fi
    if [ -f "$TMP/decode_compare.txt" ]; then echo; cat "$TMP/decode_compare.txt"; fi
    for f in "$TMP"/interleaved_fwd.txt "$TMP"/interleaved_bwd.txt; do [ -f "$f" ] && { echo; cat "$f"; }; done
    if [ -f "$TMP/targets.txt" ]; then echo; cat "$TMP/targets.txt"; fi
  } >"$SUMMARY"
}
row() { ROWS+=("$(printf '%-20s %-8s %s' "$1" "$2" "$3")"); write_summary "running"; }
# time_for LABEL SECONDS: whether a step that usually takes SECONDS still fits the budget; if not, a
# "skipped" row says so.
time_for() {
  local left
  [ "$BUDGET" -eq 0 ] && return 0
  left=$(( BUDGET - ($(date +%s) - START) ))
  [ "$left" -ge "$2" ] && return 0
  row "$1" skipped "time budget: $left s left of $BUDGET, the step takes about $2 s"
  return 1
}
section() { printf '\n===== %s =====\n' "$1"; }
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }
demangle() { bash "$ROOT/scripts/demangle.sh" "$@"; }

echo "gpu_check: $GPU_NAME, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1);" \
     "archs $ARCHS; $JOBS jobs; results in $OUT"

# ---- configure and build --------------------------------------------------------------------------------
t0=$(date +%s)
GEN=() KEEP_GOING=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja) KEEP_GOING=(-- -k 0)
PY_ARGS=()
NANOBIND_DIR=$(python3 -m nanobind --cmake_dir 2>/dev/null || true)
[ -n "$NANOBIND_DIR" ] && [ -f "$ROOT/python/CMakeLists.txt" ] && PY_ARGS=(-DFLASHATTN_BUILD_PYTHON=ON)
configure() {
  section "configure $*"
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
        "-DFLASHATTN_CUDA_ARCHITECTURES=$ARCHS" "$@"
}
configure "${PY_ARGS[@]}" >>"$BUILD_LOG" 2>&1
cfg_rc=$?
if [ $cfg_rc -ne 0 ] && [ ${#PY_ARGS[@]} -gt 0 ]; then
  # The Python extension is optional: never let it stop the C++ checks.
  PY_ARGS=()
  configure -DFLASHATTN_BUILD_PYTHON=OFF >>"$BUILD_LOG" 2>&1
  cfg_rc=$?
fi
build_rc=1
if [ $cfg_rc -eq 0 ]; then
  section "build" >>"$BUILD_LOG"
  # The library, CLI and test programs first; then everything else (the Python extension), whose failure
  # only costs the pytest step.
  # Keep going past a failing target so that what did build can still be tested.
  cmake --build "$BUILD" -j "$JOBS" --target flashattn_tests_gpu flashattn_tests_cpu flashattn_cli \
        "${KEEP_GOING[@]}" >>"$BUILD_LOG" 2>&1
  build_rc=$?
  [ $build_rc -eq 0 ] && cmake --build "$BUILD" -j "$JOBS" >>"$BUILD_LOG" 2>&1
fi
if [ $build_rc -eq 0 ]; then row build ok "$(elapsed "$t0")"; else row build FAILED "configure rc $cfg_rc, build rc $build_rc (build.log)"; fi

# Per-kernel registers and spills from ptxas -v: "Compiling entry function 'X' for 'sm_NN'", then the
# "Function properties for X" stack/spill line, then "Used N registers".
{
  echo "# Registers and spills per kernel (ptxas -v) of the kernels compiled in this run, spilling kernels first"
  printf '%-7s %5s %6s %8s %8s  %s\n' arch regs stack spill_st spill_ld kernel
  awk '
    /Compiling entry function/ { split($0, q, SQ); name = q[2]; arch = q[4]; props = ""; st = sl = stack = 0 }
    /Function properties for/  { props = $NF }
    /bytes stack frame/ && props == name { stack = $1; st = $5; sl = $9 }
    /Used [0-9]+ registers/ && name != "" { s = $0; sub(/.*Used /, "", s); split(s, r, " ");
                                 printf "%-7s %5d %6d %8d %8d\t%s\n", arch, r[1], stack, st, sl, name; name = "" }
  ' SQ="'" "$BUILD_LOG" | sort -k4,4nr -k5,5nr -k6 | demangle --rows
} >"$TMP/spills.txt"
kernels=$(($(wc -l <"$TMP/spills.txt") - 2))
spilling=$(awk 'NR > 2 && ($4 > 0 || $5 > 0)' "$TMP/spills.txt" | wc -l)
row "spills (ptxas)" info "$spilling of $kernels kernel builds spill"
# C7517: ptxas added a wgmma wait of its own before a read of accumulator registers, which serializes
# whatever the code meant to run under the wgmma in flight there (the fa3 deferred epilogue of a masked first
# block has one at 79a4d61).
injected=$(grep -c "(C7517)" "$BUILD_LOG")
# And kernels whose wgmma ptxas serialized outright (C7510-C7516, C7518 and the like; each message says why).
serialized=$(grep -c "wgmma.mma_async instructions are serialized" "$BUILD_LOG")
row "wgmma waits (ptxas)" info "$injected waits injected by ptxas (C7517), $serialized serializations of wgmma"


GPU_TESTS=$BUILD/tests/flashattn_tests_gpu
CLI=$BUILD/flashattn

# ---- tests -----------------------------------------------------------------------------------------------
ctest_row() {  # label name
  local t0 rc line
  t0=$(date +%s)
  section "ctest -L $1" >>"$TESTS_LOG"
  ctest --test-dir "$BUILD" -L "$1" --output-on-failure --timeout 600 -j "$(( JOBS > 8 ? 8 : JOBS ))" >>"$TESTS_LOG" 2>&1
  rc=$?
  line=$(grep -E 'tests passed|No tests were found' "$TESTS_LOG" | tail -n1)
  if [ $rc -eq 0 ]; then row "$2" ok "${line:-no summary} ($(elapsed "$t0"))"; else row "$2" FAILED "${line:-rc $rc} (tests.log)"; fi
}
built() { [ -x "$1" ] && [ "$1" -nt "$TMP/start" ]; }  # linked by this run, not left from an older one

# pytest of tests/python against the extension just built (copied beside the package's Python sources).
EXT=$(find "$BUILD" -name '_ext*.so' -print -quit 2>/dev/null)
if [ ! -d "$ROOT/tests/python" ]; then
  row pytest skipped "no tests/python"
elif [ -z "$EXT" ]; then
  { section "pytest tests/python"; echo "skipped: the Python extension was not built (nanobind not found or build failed)"; } >>"$TESTS_LOG"
  row pytest skipped "Python extension not built (needs nanobind)"
elif ! python3 -c "import pytest, numpy" >/dev/null 2>&1; then
  row pytest skipped "pytest or numpy missing"
else
  mkdir -p "$TMP/py/flashattn" && cp "$ROOT"/python/flashattn/*.py "$EXT" "$TMP/py/flashattn/"
  # In the background while ctest runs (ctest runs its tests side by side as well; nothing here is timed).
  py_t0=$(date +%s)
  PYTHONPATH=$TMP/py${PYTHONPATH:+:$PYTHONPATH} python3 -m pytest -q "$ROOT/tests/python" -p no:cacheprovider \
    >"$TMP/pytest.log" 2>&1 &
  PYTEST_PID=$!
fi

if [ $build_rc -eq 0 ] || built "$GPU_TESTS"; then ctest_row gpu "ctest -L gpu"; else row "ctest -L gpu" skipped "not built"; fi
if [ $build_rc -eq 0 ] || built "$CLI"; then ctest_row cli "ctest -L cli"; else row "ctest -L cli" skipped "not built"; fi

if [ -n "${PYTEST_PID:-}" ]; then
  wait "$PYTEST_PID"
  rc=$?
  { section "pytest tests/python"; cat "$TMP/pytest.log"; } >>"$TESTS_LOG"
  line=$(grep -E '(passed|failed|error)' "$TMP/pytest.log" | tail -n1)
  if [ $rc -eq 0 ]; then row pytest ok "$line ($(elapsed "$py_t0"), beside ctest)"
  else row pytest FAILED "${line:-rc $rc} (tests.log)"; fi
fi

# ---- compute-sanitizer -----------------------------------------------------------------------------------
sanitize() {  # tool filter [row label]
  local rc summary label=${3:-$1}
  section "compute-sanitizer --tool $1, --gtest_filter=$2" >>"$SAN_LOG"
  timeout "$SAN_TIMEOUT" compute-sanitizer --tool "$1" --error-exitcode 86 "$GPU_TESTS" --gtest_filter="$2" \
    >>"$SAN_LOG" 2>&1
  rc=$?
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$SAN_LOG" | tail -n1 | sed 's/^=* *//')
  case $rc in
    0) row "$label" ok "${summary:-clean}" ;;
    86) row "$label" FAILED "${summary:-errors found} (sanitizer.log)" ;;
    124) row "$label" FAILED "timed out after $SAN_TIMEOUT s" ;;
    *) row "$label" FAILED "rc $rc: ${summary:-see sanitizer.log}" ;;
  esac
}
if ! command -v compute-sanitizer >/dev/null 2>&1; then
  echo "skipped: compute-sanitizer is not installed" >>"$SAN_LOG"
  row sanitizer skipped "compute-sanitizer not installed"
elif [ ! -x "$GPU_TESTS" ]; then
  row sanitizer skipped "no GPU test binary"
elif time_for sanitizer 60; then
  sanitize memcheck "$SAN_FILTER"
  sanitize racecheck "$RACE_FILTER"
  sanitize memcheck "$FA3_SAN_FILTER" "memcheck fa3"
  sanitize racecheck "$FA3_SAN_FILTER" "racecheck fa3"
fi

# ---- SASS: tensor-core instructions per attention kernel -----------------------------------------------
{
  echo "# Tensor-core instructions in the SASS of the attention kernels (cuobjdump --dump-sass)"
  printf '%-8s %6s %6s  %s\n' arch HMMA HGMMA kernel
} >"$SASS"
BIN=$CLI
[ -x "$BIN" ] || BIN=$GPU_TESTS
if command -v cuobjdump >/dev/null 2>&1 && [ -x "$BIN" ]; then
  cuobjdump --dump-sass "$BIN" >"$TMP/sass.txt" 2>/dev/null  # read by both checks below
  awk -f "$ROOT/scripts/sass_counts.awk" "$TMP/sass.txt" | demangle | grep -E 'fa[123]_|fa[123]::' |
    awk -F'\t' '{ printf "%-8s %6d %6d  %s\n", $1, $2, $3, substr($4, 1, 160) }' >>"$SASS"
  fa2_kernels=$(grep -c 'fa2' "$SASS")
  fa2_hmma=$(awk '/fa2/ { s += $2 } END { print s + 0 }' "$SASS")
  fa2_hgmma=$(awk '/fa2/ { s += $3 } END { print s + 0 }' "$SASS")
  row "sass" info "fa2: $fa2_kernels kernel builds, $fa2_hmma HMMA, $fa2_hgmma HGMMA"
  fa3_kernels=$(grep -c 'fa3_fwd_kernel' "$SASS")
  fa3_no_hgmma=$(awk '/fa3_fwd_kernel/ && $1 == "sm_90a" && $3 == 0' "$SASS" | wc -l)
  fa3_hgmma=$(awk '/fa3_fwd_kernel/ { s += $3 } END { print s + 0 }' "$SASS")
  row "sass fa3" info "$fa3_kernels kernel builds, $fa3_hgmma HGMMA; $fa3_no_hgmma sm_90a builds without HGMMA"
  # Intra-warpgroup overlap as scheduled by ptxas (scripts/sass_overlap.sh): per fa3 kernel, main-loop waits
  # with the softmax before / after the P V wait, and the kernel's instruction count.
  {
    echo
    echo "# fa3 intra-warpgroup overlap in the SASS: main-loop blocks whose softmax starts before / after the P V wait; instructions"
    bash "$ROOT/scripts/sass_overlap.sh" "$TMP/sass.txt"
  } >"$TMP/overlap.txt"
  cat "$TMP/overlap.txt" >>"$SASS"
  ov_bad=$(awk 'NR > 2 && $2 > 0' "$TMP/overlap.txt" | wc -l)
  ov_good=$(awk 'NR > 2 && $1 > 0 && $2 == 0' "$TMP/overlap.txt" | wc -l)
  if [ "$ov_bad" -eq 0 ]; then row "sass fa3 overlap" ok "$ov_good builds overlap softmax with P V in every main loop"
  else row "sass fa3 overlap" FAILED "$ov_bad builds wait for P V before the softmax (sass_summary.txt)"; fi
else
  echo "skipped: cuobjdump or the binary is missing" >>"$SASS"
  row "sass" skipped "cuobjdump or binary missing"
fi
{ echo; cat "$TMP/spills.txt"; } >>"$SASS"

# ---- benchmark -------------------------------------------------------------------------------------------
if [ "$BENCH_MODE" = off ]; then
  row bench skipped "FLASHATTN_BENCH=off"
elif [ ! -x "$CLI" ]; then
  row bench skipped "no flashattn CLI"
elif time_for bench 220; then
  t0=$(date +%s)
  # fa3 (forward; its backward rows skip) and fa2 over the whole sweep of the FlashAttention papers (quick
  # mode: a subset); the baselines (fa1, standard) on the quick subset only, since at long sequences they
  # take seconds per call.
  FA2_QUICK=()
  [ "$BENCH_MODE" = quick ] && FA2_QUICK=(--quick)
  section "flashattn bench --gpu --algo fa3,fa2 ${FA2_QUICK[*]}" >>"$TESTS_LOG"
  "$CLI" bench --gpu --algo fa3,fa2 "${FA2_QUICK[@]}" --json "$TMP/ours_fa2.json" >>"$TESTS_LOG" 2>&1
  bench_rc=$?
  BASE_QUICK=(--quick)
  [ "$BENCH_MODE" = full ] && BASE_QUICK=()
  section "flashattn bench --gpu --algo fa1,standard ${BASE_QUICK[*]}" >>"$TESTS_LOG"
  "$CLI" bench --gpu --algo fa1,standard "${BASE_QUICK[@]}" --json "$TMP/ours_base.json" >>"$TESTS_LOG" 2>&1
  bench_rc=$(( bench_rc | $? ))
  section "flashattn bench --gpu --ablation" >>"$TESTS_LOG"
  "$CLI" bench --gpu --ablation --json "$OUT/ablation.json" >>"$TESTS_LOG" 2>&1 || bench_rc=1
  python3 - "$TMP/ours_fa2.json" "$TMP/ours_base.json" "$TMP/ours.json" >>"$TESTS_LOG" 2>&1 <<'PY'
import json, sys
first, second, out = sys.argv[1:4]
merged = json.load(open(first))
for key in ("rows", "skipped"):
    if isinstance(merged.get(key), list):
        merged[key].extend(json.load(open(second)).get(key, []))
json.dump(merged, open(out, "w"), indent=1)
PY
  section "bench/peers_sdpa.py" >>"$TESTS_LOG"
  if [ -f "$TMP/ours.json" ]; then
    python3 "$ROOT/bench/peers_sdpa.py" --shapes-from "$TMP/ours.json" --json "$TMP/peers.json" >>"$TESTS_LOG" 2>&1
    python3 "$ROOT/bench/compare.py" --ours "$TMP/ours.json" --peers "$TMP/peers.json" --out "$BENCH_JSON" \
      >"$TMP/compare.txt" 2>&1
    cmp_rc=$?
    cat "$TMP/compare.txt" >>"$TESTS_LOG"
    rows=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['table']))" "$BENCH_JSON" 2>/dev/null)
    if [ $bench_rc -eq 0 ] && [ $cmp_rc -eq 0 ]; then row bench ok "${rows:-?} shapes ($(elapsed "$t0"))"
    else row bench FAILED "bench rc $bench_rc, compare rc $cmp_rc (tests.log)"; fi
  else
    row bench FAILED "flashattn bench wrote no JSON (rc $bench_rc, tests.log)"
  fi
fi

# ---- interleaved: ours and the peer in one process, alternating rounds (bench/interleaved.py) -----------
# The two programs above each warm up for 200 ms, and the GPU's clock is still falling then, so short calls
# can be timed at different clocks on the two sides; here both sides share one warm-up and alternate. Quick
# shapes: fa3 against cuDNN (forward), fa2 against flash (backward). Written into bench.json ("interleaved")
# and the summary.
if [ "$BENCH_MODE" = off ] || [ ! -f "$BENCH_JSON" ]; then
  row interleaved skipped "no benchmark run"
elif [ ! -d "$TMP/py/flashattn" ]; then
  row interleaved skipped "Python extension not built"
elif time_for interleaved 35; then
  t0=$(date +%s)
  section "bench/interleaved.py --quick" >>"$TESTS_LOG"
  il_rc=0
  for dir in fwd bwd; do
    PYTHONPATH=$TMP/py${PYTHONPATH:+:$PYTHONPATH} python3 "$ROOT/bench/interleaved.py" --dir $dir --quick \
      --warmup-ms 600 --json "$TMP/interleaved_$dir.json" >"$TMP/interleaved_$dir.txt" 2>&1 || il_rc=1
    cat "$TMP/interleaved_$dir.txt" >>"$TESTS_LOG"
  done
  python3 - "$BENCH_JSON" "$TMP/interleaved_fwd.json" "$TMP/interleaved_bwd.json" >>"$TESTS_LOG" 2>&1 <<'PY' || il_rc=1
import json, os, sys
bench = json.load(open(sys.argv[1]))
bench["interleaved"] = [json.load(open(f)) for f in sys.argv[2:] if os.path.exists(f)]
json.dump(bench, open(sys.argv[1], "w"), indent=1)
PY
  gm=$(grep -h "^geometric mean" "$TMP"/interleaved_*.txt 2>/dev/null | sed 's/geometric mean of //; s/ over .*//' | paste -sd';' -)
  if [ $il_rc -eq 0 ]; then row interleaved ok "${gm:-no rows} ($(elapsed "$t0"))"
  else row interleaved FAILED "rc $il_rc (tests.log)"; fi
fi

# ---- decode (KV cache): split-KV tests, bandwidth benchmark, SDPA peers ---------------------------------
# decode.json: `flashattn bench --gpu --decode` merged with bench/peers_decode.py by bench/compare.py, and
# ("one_process") ours against SDPA cuDNN in one process, alternating rounds (bench/decode_ab.py).
if [ "$BENCH_MODE" = off ]; then
  row decode skipped "FLASHATTN_BENCH=off"
elif [ ! -x "$CLI" ] || [ ! -x "$GPU_TESTS" ]; then
  row decode skipped "no flashattn CLI or GPU test binary"
elif time_for decode 65; then
  t0=$(date +%s)
  section "decode tests (--gtest_filter=*DecodeGpu*)" >>"$TESTS_LOG"
  "$GPU_TESTS" --gtest_filter='*DecodeGpu*' >>"$TESTS_LOG" 2>&1
  dec_test_rc=$?
  section "flashattn bench --gpu --decode" >>"$TESTS_LOG"
  "$CLI" bench --gpu --decode --json "$TMP/decode_ours.json" >>"$TESTS_LOG" 2>&1
  dec_bench_rc=$?
  section "bench/peers_decode.py" >>"$TESTS_LOG"
  python3 "$ROOT/bench/peers_decode.py" --json "$TMP/decode_peers.json" >>"$TESTS_LOG" 2>&1
  if [ -f "$TMP/decode_ours.json" ]; then
    python3 "$ROOT/bench/compare.py" --ours "$TMP/decode_ours.json" --peers "$TMP/decode_peers.json" \
      --out "$OUT/decode.json" >"$TMP/decode_compare.txt" 2>&1
    cat "$TMP/decode_compare.txt" >>"$TESTS_LOG"
  fi
  if [ -d "$TMP/py/flashattn" ] && [ -f "$OUT/decode.json" ]; then
    section "bench/decode_ab.py" >>"$TESTS_LOG"
    PYTHONPATH=$TMP/py${PYTHONPATH:+:$PYTHONPATH} python3 "$ROOT/bench/decode_ab.py" --rounds 10 --warmup-ms 600 \
      --json "$TMP/decode_ab.json" >"$TMP/decode_ab.txt" 2>&1
    cat "$TMP/decode_ab.txt" >>"$TESTS_LOG"
    cat "$TMP/decode_ab.txt" >>"$TMP/decode_compare.txt"
    if [ -f "$TMP/decode_ab.json" ]; then
      python3 - "$OUT/decode.json" "$TMP/decode_ab.json" >>"$TESTS_LOG" 2>&1 <<'PY'
import json, sys
decode = json.load(open(sys.argv[1]))
decode["one_process"] = json.load(open(sys.argv[2]))
json.dump(decode, open(sys.argv[1], "w"), indent=1)
PY
    fi
  fi
  if [ $dec_test_rc -eq 0 ] && [ $dec_bench_rc -eq 0 ]; then row decode ok "tests and bench ($(elapsed "$t0"))"
  else row decode FAILED "tests rc $dec_test_rc, bench rc $dec_bench_rc (tests.log)"; fi
fi

# ---- targets: the performance targets read off this run's bench.json and decode.json (bench/targets.py) ----
# A report at the end of the summary, not a step: a missed target does not fail the check.
if [ -f "$BENCH_JSON" ] || [ -f "$OUT/decode.json" ]; then
  python3 "$ROOT/bench/targets.py" "$OUT" >"$TMP/targets.txt" 2>&1 ||
    echo "bench/targets.py failed (rc $?)" >>"$TMP/targets.txt"
fi

# ---- summary ---------------------------------------------------------------------------------------------
write_summary
cat "$SUMMARY"
grep -q ' FAILED ' "$SUMMARY" && exit 1
exit 0
