#!/usr/bin/env bash
# Several candidate forms of one change, timed in turn in one device call: for each NAME=PATCH, the patch is
# applied on top of the ones before it (so PATCH holds what that form adds to the previous one) and
# scripts/candidate_ab.sh runs into OUT/NAME (its build directory is reused, so later forms rebuild only what
# changed); OUT/NAME is then packed as OUT/NAME.tar.gz, so that a call of several forms returns few files.
# The environment passes through to candidate_ab.sh (CAND_ALGO, CAND_SHAPES, CAND_ROUNDS, CAND_TESTS, ...).
#
# Usage: bash scripts/candidate_ab_forms.sh OUT NAME=PATCH [NAME=PATCH ...]
set -uo pipefail

[ $# -ge 2 ] || { echo "usage: $0 OUT NAME=PATCH [NAME=PATCH ...]" >&2; exit 2; }
OUT=$1
shift
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for form in "$@"; do
  name=${form%%=*} patch=${form#*=}
  [ -n "$name" ] && [ "$name" != "$form" ] || { echo "not NAME=PATCH: $form" >&2; exit 2; }
  mkdir -p "$OUT/$name"
  CAND_PATCH="$patch" bash "$HERE/candidate_ab.sh" "$OUT/$name" 2>&1 | tee "$OUT/$name/console.txt" | tail -n 20
  tar -czf "$OUT/$name.tar.gz" -C "$OUT" "$name" && rm -rf "${OUT:?}/$name"
done
