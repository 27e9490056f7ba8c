#!/usr/bin/env bash
# One device call that tries a change to the fa3 kernels against its base: the trees (made by
# scripts/ab_trees.sh) are built side by side (scripts/ab_build.sh; the candidate with its GPU tests, the
# others with the CLI only); the candidate's fa3 GPU tests run, then memcheck and racecheck on
# Fa3Forward.SmallShapes; each tree's ptxas report and SASS are summed up (spills, injected or serialized
# wgmma waits, scripts/sass_overlap.sh, TMA stores); then scripts/fa3_probe.sh rounds over every tree until
# the time limit. Trees after the candidate are timed only (bounds whose output may be wrong on purpose),
# unless FA3_CANDIDATE_TESTED names more than one tested tree.
#
# Usage: bash scripts/fa3_candidate.sh OUT BASE=TREE CANDIDATE=TREE [NAME=TREE ...]
# Writes OUT/gpu.txt, OUT/checks.txt (tests, sanitizers, build and SASS summary), OUT/probe.txt (every
# probe run and the medians against BASE) and OUT/logs.tar.gz (builds, test and sanitizer logs); prints
# each step's result as it goes.
# Environment: FA3_PROBE_SHAPES and FA3_PROBE_ROUNDS (default 6) as scripts/fa3_probe.sh takes them,
# FA3_CANDIDATE_LIMIT (seconds from the start after which no probe run starts; default 470),
# FA3_CANDIDATE_TESTS (gtest filter, default 'Fa3*:*/fa3'), FA3_CANDIDATE_TESTED (how many trees from the
# candidate on get the tests and sanitizers, default 1; with more, their logs carry the tree's name; 0: none,
# every tree built without tests and timed only, e.g. a second call on trees already tested),
# FA3_CANDIDATE_BUILD=0 (the trees are built already), FA3_AB_COMMIT (what the trees are, in checks.txt).
set -uo pipefail

[ $# -ge 3 ] || { echo "usage: $0 OUT BASE=TREE CANDIDATE=TREE [NAME=TREE ...]" >&2; exit 2; }
OUT=$1
shift
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
t0=$(date +%s)
limit=${FA3_CANDIDATE_LIMIT:-470}
names=() trees=()
for arg in "$@"; do
  names+=("${arg%%=*}")
  trees+=("${arg#*=}")
done
# The trees that get the GPU tests: the candidate and, with FA3_CANDIDATE_TESTED=N, the N - 1 after it (0: none).
tested=${FA3_CANDIDATE_TESTED:-1}
[ "$tested" -ge 0 ] && [ "$tested" -lt "${#trees[@]}" ] || { echo "FA3_CANDIDATE_TESTED out of range" >&2; exit 2; }
mkdir -p "$OUT/logs"
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } |
  tee "$OUT/gpu.txt"

if [ "${FA3_CANDIDATE_BUILD:-1}" != 0 ]; then
  others=("${trees[0]}" "${trees[@]:$(( tested + 1 ))}")
  if [ "$tested" -gt 0 ]; then
    bash "$HERE/ab_build.sh" "$OUT/logs" "flashattn_cli flashattn_tests_gpu" "${trees[@]:1:$tested}" &
  fi
  bash "$HERE/ab_build.sh" "$OUT/logs" flashattn_cli "${others[@]}"
  wait
fi

checks=$OUT/checks.txt
echo "trees: ${FA3_AB_COMMIT:-$*}" >"$checks"
for (( c = 1; c <= tested; c++ )); do
  name=${names[$c]}
  sfx=$([ "$tested" -gt 1 ] && echo "-$name")  # one tested tree: tests.log, memcheck.log, racecheck.log
  bash "$HERE/tree_gpu_checks.sh" "${trees[$c]}/build-ab/tests/flashattn_tests_gpu" "$OUT/logs" "$checks" "$name" "$sfx"
done
echo "checked after $(elapsed)"

# Per tree: what ptxas reported (scripts/ptxas_summary.sh on its build log) and what the SASS of its fa3
# kernels holds (scripts/sass_overlap.sh; TMA stores).
for i in "${!trees[@]}"; do
  log=$OUT/logs/build-$(basename "${trees[$i]}").log
  cli=${trees[$i]}/build-ab/flashattn
  {
    echo "== ${names[$i]}"
    [ -f "$log" ] && bash "$HERE/ptxas_summary.sh" "$log"
    if command -v cuobjdump >/dev/null && [ -x "$cli" ]; then
      cuobjdump --dump-sass "$cli" >"$OUT/sass.tmp" 2>/dev/null
      echo "overlap (good bad: builds)"
      bash "$HERE/sass_overlap.sh" "$OUT/sass.tmp" | awk '{print "  " $1, $2}' | sort | uniq -c
      echo "UTMASTG $(grep -c UTMASTG "$OUT/sass.tmp")"
      rm -f "$OUT/sass.tmp"
    else
      echo "no SASS (cuobjdump or the CLI missing)"
    fi
  } >>"$checks"
done

FA3_PROBE_UNTIL=$(( t0 + limit )) bash "$HERE/fa3_probe.sh" "$OUT/probe.txt" "$@"  # the NAME=TREE arguments
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
echo "done after $(elapsed)"
