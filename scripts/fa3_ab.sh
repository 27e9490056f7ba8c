#!/usr/bin/env bash
# A/B of fa3 forward builds in one GPU session: several source trees built side by side, the fa3 sweep of
# `flashattn bench --gpu` run for each in alternating order (first pass in the given order, second pass
# reversed, so a slow drift of the clock favours none), PyTorch SDPA's cuDNN backend once on the same
# shapes, and one JSON that lists every shape with each tree's TFLOP/s (mean of the passes, and each pass).
#
# Usage: bash scripts/fa3_ab.sh OUT NAME=TREE [NAME=TREE ...]
#   TREE: a source tree of flashattn (a checkout, or one made by scripts/ab_trees.sh: a commit plus patches).
# Writes OUT/ab.json (the table), OUT/raw.tar.gz (every bench and peer JSON), OUT/ab.log (what every step
# printed, with each tree's ptxas report and the SASS check of its fa3 kernels, scripts/sass_overlap.sh)
# and, with FA3_AB_NCU="PROFILE ..." (profile names of scripts/ncu_profile.sh, e.g. fa3_d128_n512),
# OUT/ncu-NAME.tar.gz per tree (or per tree named in FA3_AB_NCU_TREES).
# ab.json records each tree's source digest (scripts/source_digest.sh) and, when FA3_AB_COMMIT is set, that
# text as "commit" (e.g. "base = ccca393; new = base + x.patch": the trees have no git metadata of their own).
# Environment: FA3_AB_PASSES (default 2), FA3_AB_PEERS=0 (no cuDNN run), FA3_AB_TESTS=NAME (also build
# that tree's GPU tests and run the fa3 ones, FA3_AB_TEST_FILTER, default Fa3*:*GpuForward*fa3*, each test
# in its own process under FA3_AB_TEST_TIMEOUT seconds, default 120, so that a hang names its test;
# FA3_AB_WATCHDOG=1 builds them apart with the mbarrier watchdog, so that a hang also names its barrier),
# JOBS (default nproc), FA3_AB_BENCH_TIMEOUT (seconds per sweep, default 300: a kernel that hangs ends the
# sweep, not the session). Every step prints into OUT/ab.log as it goes (the sweeps' rows too), so a run
# stopped part way still leaves its numbers there.
# FA3_AB_BENCH=fa2 sweeps `--algo fa2` instead (FA3_AB_BENCH_ARGS="--dir fwd" for its forward rows only),
# with SDPA's flash backend (FA2 itself) as the peer.
# FA3_AB_BENCH=decode A/Bs the KV-cache kernels instead: `flashattn bench --gpu --decode` per tree and pass
# (FA3_AB_BENCH_ARGS appended, e.g. "--splits 4"), bench/peers_decode.py's cuDNN rows, a TB/s table, and
# the tests filter *DecodeGpu* by default.
set -uo pipefail

[ $# -ge 2 ] || { echo "usage: $0 OUT NAME=TREE [NAME=TREE ...]" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$1
shift
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
LOG=$OUT/ab.log
: >"$LOG"
RAW=$(mktemp -d)
trap 'rm -rf "$RAW"' EXIT
export PATH=$PATH:/usr/local/cuda/bin
JOBS=${JOBS:-$(nproc)}
PASSES=${FA3_AB_PASSES:-2}
KIND=${FA3_AB_BENCH:-fa3}
case $KIND in
  fa3) BENCH_ARGS=(--gpu --algo fa3) TABLE_ARGS=() DEFAULT_FILTER='Fa3*:*GpuForward*fa3*' ;;
  fa2) BENCH_ARGS=(--gpu --algo fa2) TABLE_ARGS=(--fa2) DEFAULT_FILTER='*Fa2*:*GpuForward*fa2*:*GpuBackward*fa2*' ;;
  decode) BENCH_ARGS=(--gpu --decode) TABLE_ARGS=(--decode) DEFAULT_FILTER='*DecodeGpu*' ;;
  *) echo "fa3_ab: FA3_AB_BENCH must be fa3, fa2 or decode, got '$KIND'" >&2; exit 2 ;;
esac
read -r -a EXTRA_BENCH_ARGS <<<"${FA3_AB_BENCH_ARGS:-}"
TEST_FILTER=${FA3_AB_TEST_FILTER:-$DEFAULT_FILTER}
say() { echo "fa3_ab: $*" | tee -a "$LOG"; }

names=() trees=()
test_tree=  # the source tree of FA3_AB_TESTS
for arg in "$@"; do
  name=${arg%%=*} tree=${arg#*=}
  [ -f "$tree/CMakeLists.txt" ] || { echo "fa3_ab: $tree is no flashattn source tree" >&2; exit 2; }
  names+=("$name")
  trees+=("$(cd "$tree" && pwd)")
  [ "$name" = "${FA3_AB_TESTS:-}" ] && test_tree=${trees[-1]}
done
[ -z "${FA3_AB_TESTS:-}" ] || [ -n "$test_tree" ] || { echo "fa3_ab: FA3_AB_TESTS names no tree" >&2; exit 2; }
WATCHDOG=${FA3_AB_WATCHDOG:-0}

# Each tree's source digest (scripts/source_digest.sh), which ab.json records: any checkout of the commit a
# tree came from (with the same patch applied) prints the same.
for i in "${!names[@]}"; do
  digest=$(bash "$ROOT/scripts/source_digest.sh" "${trees[$i]}" 2>/dev/null) || digest=unknown
  printf '%s %s\n' "${names[$i]}" "$digest" >>"$RAW/sources.txt"
  say "${names[$i]}: sources $digest"
done

# build TREE BUILD_DIR LOG TARGET... [-- CMAKE_ARG...]: configure (Release, sm_90a) and build the targets.
build() {
  local tree=$1 dir=$2 log=$3 targets=() extra=()
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do targets+=("$1"); shift; done
  [ $# -gt 0 ] && shift && extra=("$@")
  cmake -S "$tree" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
        -DFLASHATTN_CUDA_ARCHITECTURES=90a "${extra[@]}" >"$log" 2>&1 &&
    cmake --build "$dir" -j "$per" --target "${targets[@]}" >>"$log" 2>&1
}

# ---- build every tree at once, the cores shared out ----
per=$(( JOBS / ${#names[@]} ))
[ $per -ge 1 ] || per=1
t0=$(date +%s)
pids=()
for i in "${!names[@]}"; do
  targets=(flashattn_cli)
  [ "${trees[$i]}" = "$test_tree" ] && [ "$WATCHDOG" = 0 ] && targets+=(flashattn_tests_gpu)
  build "${trees[$i]}" "${trees[$i]}/build-ab" "$RAW/build-${names[$i]}.log" "${targets[@]}" &
  pids+=($!)
done
if [ -n "$test_tree" ] && [ "$WATCHDOG" != 0 ]; then
  # The tests on their own build, with the mbarrier watchdog (sm90_ptx.cuh) compiled in.
  build "$test_tree" "$test_tree/build-wd" "$RAW/build-wd.log" flashattn_tests_gpu \
        -- -DCMAKE_CUDA_FLAGS=-DFLASHATTN_MBAR_WATCHDOG=1 &
  pids+=($!)
fi
fail=0
for pid in "${pids[@]}"; do wait "$pid" || fail=1; done
for f in "$RAW"/build-*.log; do
  grep -qE "error|FAILED" "$f" && { say "build log $(basename "$f") shows errors"; grep -E "error|FAILED" "$f" | head -n 20 >>"$LOG"; }
done
for i in "${!names[@]}"; do
  say "${names[$i]}: $(bash "$ROOT/scripts/ptxas_summary.sh" "$RAW/build-${names[$i]}.log")"
  cat "$RAW/build-${names[$i]}.log" >>"$LOG"
  rm -f "$RAW/build-${names[$i]}.log"
done
say "builds took $(( $(date +%s) - t0 )) s"
[ $fail -eq 0 ] || exit 1

# ---- what ptxas made of each tree's fa3 kernels (scripts/sass_overlap.sh) ----
# Per kernel build: main-loop blocks whose softmax starts before / after the P V wait (the second must be 0)
# and the SASS instruction count, so that a change which moves the compiled main loop shows before the timing.
if command -v cuobjdump >/dev/null 2>&1; then
  for i in "${!names[@]}"; do
    say "${names[$i]}: fa3 SASS (softmax before / after the P V wait, instructions)"
    cuobjdump --dump-sass "${trees[$i]}/build-ab/flashattn" 2>/dev/null | bash "$ROOT/scripts/sass_overlap.sh" |
      tee -a "$LOG" "$RAW/overlap-${names[$i]}.txt"
    say "${names[$i]}: $(awk '$2 > 0' "$RAW/overlap-${names[$i]}.txt" | wc -l) of $(wc -l <"$RAW/overlap-${names[$i]}.txt") fa3 builds start a softmax after its P V wait"
  done
fi

# ---- the sweeps, alternating order ----
for pass in $(seq 1 "$PASSES"); do
  order=("${!names[@]}")
  if [ $(( pass % 2 )) -eq 0 ]; then
    order=()
    for (( i=${#names[@]}-1; i>=0; i-- )); do order+=("$i"); done
  fi
  for i in "${order[@]}"; do
    say "pass $pass: ${names[$i]}"
    FLASHATTN_COMMIT=${names[$i]} timeout "${FA3_AB_BENCH_TIMEOUT:-300}" "${trees[$i]}/build-ab/flashattn" bench \
      "${BENCH_ARGS[@]}" "${EXTRA_BENCH_ARGS[@]}" --json "$RAW/${names[$i]}-$pass.json" >>"$LOG" 2>&1 ||
      say "bench of ${names[$i]} pass $pass FAILED (rc $?)"
  done
done

# ---- the peer, once ----
first=$RAW/${names[0]}-1.json
if [ "${FA3_AB_PEERS:-1}" != 0 ] && python3 -c "import torch" >/dev/null 2>&1; then
  peer=cudnn
  [ "$KIND" = fa2 ] && peer=flash  # FA2 itself
  say "$peer through PyTorch SDPA"
  if [ "$KIND" = decode ]; then
    python3 "$ROOT/bench/peers_decode.py" --backends cudnn --json "$RAW/peers.json" >>"$LOG" 2>&1 || say "peers FAILED"
  else
    python3 "$ROOT/bench/peers_sdpa.py" --backends "$peer" --shapes-from "$first" --json "$RAW/peers.json" \
      >>"$LOG" 2>&1 || say "peers FAILED"
  fi
fi

# ---- the tests of one tree ----
if [ -n "$test_tree" ]; then
  bin=$test_tree/build-ab/tests/flashattn_tests_gpu
  [ "$WATCHDOG" != 0 ] && bin=$test_tree/build-wd/tests/flashattn_tests_gpu
  say "tests of $FA3_AB_TESTS: $TEST_FILTER, one process each"
  passed=0 failed=0
  for t in $("$bin" --gtest_filter="$TEST_FILTER" --gtest_list_tests |
             awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }'); do
    t0=$(date +%s)
    timeout "${FA3_AB_TEST_TIMEOUT:-120}" "$bin" --gtest_filter="$t" >"$RAW/test.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then passed=$((passed + 1)); say "  ok $t ($(( $(date +%s) - t0 )) s)"
    else failed=$((failed + 1)); say "  FAILED $t (rc $rc$( [ $rc -eq 124 ] && echo ', timed out'))"; tail -n 30 "$RAW/test.log" >>"$LOG"; fi
  done
  say "tests: $passed passed, $failed failed"
fi

# ---- profiles ----
if [ -n "${FA3_AB_NCU:-}" ]; then
  read -r -a ncu_profiles <<<"$FA3_AB_NCU"
  for i in "${!names[@]}"; do
    case " ${FA3_AB_NCU_TREES:-${names[*]}} " in *" ${names[$i]} "*) ;; *) continue ;; esac
    say "ncu ${FA3_AB_NCU}: ${names[$i]}"
    d=$OUT/ncu-${names[$i]}
    FLASHATTN_BUILD_DIR=${trees[$i]}/build-ab bash "$ROOT/scripts/ncu_profile.sh" "$d" "${ncu_profiles[@]}" >>"$LOG" 2>&1 ||
      say "ncu of ${names[$i]} FAILED"
    tar -czf "$d.tar.gz" -C "$OUT" "ncu-${names[$i]}" && rm -rf "$d"
  done
fi

# ---- one table ----
python3 "$ROOT/bench/ab_table.py" "${TABLE_ARGS[@]}" "$RAW" "${names[@]}" | tee -a "$LOG"
# The table, and the raw results in one archive (each tree's pass files, the peers).
mv "$RAW/ab.json" "$OUT/ab.json"
(cd "$RAW" && tar -czf "$OUT/raw.tar.gz" -- *.json)
say "done"
