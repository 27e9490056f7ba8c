#!/usr/bin/env bash
# The GPU checks of one built tree, as the device-call scripts run them: its GPU tests (CHECK_TESTS, a gtest
# filter; default FA3_CANDIDATE_TESTS or the fa3 tests, 'Fa3*:*/fa3'), then memcheck and racecheck of
# CHECK_SANITIZE (default Fa3Forward.SmallShapes); either set to empty skips that step. Logs go to
# LOGDIR/tests<SUFFIX>.log, memcheck<SUFFIX>.log and racecheck<SUFFIX>.log; one line per step ("tests NAME
# rc N: ...", the failed tests, "memcheck NAME rc N: <summary>", ...) is appended to CHECKS and printed. The
# environment passes through to the tests (FLASHATTN_FA3_CANDIDATE=1 or FLASHATTN_FA2_CANDIDATE=1 checks the
# candidate form of a candidate build).
#
# Usage: bash scripts/tree_gpu_checks.sh TEST_BINARY LOGDIR CHECKS NAME [SUFFIX]
set -uo pipefail

[ $# -ge 4 ] || { echo "usage: $0 TEST_BINARY LOGDIR CHECKS NAME [SUFFIX]" >&2; exit 2; }
tests=$1 logs=$2 checks=$3 name=$4 sfx=${5:-}
filter=${CHECK_TESTS-${FA3_CANDIDATE_TESTS:-Fa3*:*/fa3}}
sanitize=${CHECK_SANITIZE-Fa3Forward.SmallShapes}
if [ ! -x "$tests" ]; then
  echo "tests $name: no test binary at $tests" | tee -a "$checks"
  exit 0
fi
if [ -n "$filter" ]; then
  timeout 200 "$tests" --gtest_filter="$filter" >"$logs/tests$sfx.log" 2>&1
  rc=$?
  echo "tests $name rc $rc: $(grep -E '^\[  (PASSED|FAILED)  \]' "$logs/tests$sfx.log" | tr '\n' ' ')" |
    tee -a "$checks"
  grep -E '^\[  FAILED  \]' "$logs/tests$sfx.log" | head -20 | tee -a "$checks"
fi
[ -n "$sanitize" ] || exit 0
for tool in memcheck racecheck; do
  if command -v compute-sanitizer >/dev/null; then
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 86 "$tests" \
      --gtest_filter="$sanitize" >"$logs/$tool$sfx.log" 2>&1
    echo "$tool $name rc $?: $(grep -E 'SUMMARY' "$logs/$tool$sfx.log")" | tee -a "$checks"
  else
    echo "$tool $name: no compute-sanitizer" | tee -a "$checks"
  fi
done
