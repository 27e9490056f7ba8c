#!/usr/bin/env bash
# A digest of the sources a build and its tests read (CMakeLists.txt, cmake/, include/, src/, tools/,
# python/, tests/, bench/*.py, scripts/), independent of git metadata. scripts/gpu_check.sh records it in
# its summary, so a results folder can be tied to a commit after the fact:
#   d=$(mktemp -d) && git archive COMMIT | tar -x -C "$d" && bash scripts/source_digest.sh "$d"
# prints the same digest for the same sources (what .gitignore leaves out of those folders is left out here).
# Usage: bash scripts/source_digest.sh [TREE]   (default: this checkout)
set -euo pipefail
TREE=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$TREE"
paths=()
for p in CMakeLists.txt cmake include src tools python tests scripts; do [ -e "$p" ] && paths+=("$p"); done
{
  [ ${#paths[@]} -eq 0 ] || find "${paths[@]}" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' \
                                 -not -path '*.egg-info/*' -not -path '*/.pytest_cache/*'
  [ ! -d bench ] || find bench -maxdepth 1 -type f -name '*.py'
} | LC_ALL=C sort | tr '\n' '\0' | xargs -0 -r sha256sum | sha256sum | cut -c1-16
