#!/usr/bin/env bash
# One device call of a decode A/B over trees made by scripts/ab_trees.sh (carried to the GPU machine): builds
# every tree's CLI and GPU tests (scripts/ab_build.sh), runs the decode GPU tests on the trees named in
# DECODE_AB_TESTED, times KV-cache calls in rotating rounds (scripts/decode_probe.sh) until LIMIT seconds after
# the start, then runs memcheck and racecheck of DECODE_AB_SANITIZE, and packs the logs so that four files
# come back: gpu.txt, checks.txt (one line per test run and sanitizer), probe.txt and logs.tar.gz (build logs
# with ptxas -v, test and sanitizer logs, probe.jsonl).
#
# Usage: bash scripts/decode_ab_call.sh OUTDIR NAME=TREE [NAME=TREE ...]   (the first tree is the base)
# Environment: LIMIT (default 400; the sanitizers may take up to 180 s after it), DECODE_AB_TESTED (names,
# space-separated; default every tree), DECODE_AB_SANITIZE ("NAME GTEST_FILTER"; default none),
# DECODE_PROBE_CASES (passed on; default decode_probe.sh's four shapes).
set -uo pipefail

[ $# -ge 2 ] || { echo "usage: $0 OUTDIR NAME=TREE [NAME=TREE ...]" >&2; exit 2; }
OUT=$1
shift
t0=$(date +%s)
LIMIT=${LIMIT:-400}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
declare -A tree_of
names=() trees=()
for arg in "$@"; do
  names+=("${arg%%=*}")
  trees+=("${arg#*=}")
  tree_of[${arg%%=*}]=${arg#*=}
done
checks=$OUT/checks.txt
: >"$checks"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
bash scripts/ab_build.sh "$OUT" "flashattn_cli flashattn_tests_gpu" "${trees[@]}" | tee -a "$checks"
# One tree's tests and/or sanitizers (scripts/tree_gpu_checks.sh; logs named by tree).
check() {  # name tests-filter sanitize-filter
  CHECK_TESTS=$2 CHECK_SANITIZE=$3 bash scripts/tree_gpu_checks.sh \
    "${tree_of[$1]}/build-ab/tests/flashattn_tests_gpu" "$OUT" "$checks" "$1" "-$1"
}
for name in ${DECODE_AB_TESTED:-${names[*]}}; do
  check "$name" '*Decode*:*KvCache*:*KVCache*' ''
done
DECODE_PROBE_UNTIL=$((t0 + LIMIT)) bash scripts/decode_probe.sh "$OUT" "$@"
if [ -n "${DECODE_AB_SANITIZE:-}" ]; then
  read -r name filter <<<"$DECODE_AB_SANITIZE"
  check "$name" '' "$filter"
fi
(cd "$OUT" && tar -czf logs.tar.gz --ignore-failed-read build-*.log tests-*.log memcheck-*.log racecheck-*.log \
  probe.jsonl 2>/dev/null; rm -f build-*.log tests-*.log memcheck-*.log racecheck-*.log probe.jsonl)
echo "done at $(($(date +%s) - t0)) s"
