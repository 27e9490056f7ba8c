#!/usr/bin/env bash
# Source trees for scripts/fa3_ab.sh: each NAME is the library at one commit with zero or more patches applied,
# extracted under DIR/NAME without bench/results (the measured files are most of the repository's bytes and no
# build needs them). A patch that does not apply cleanly stops everything (exit 1), so that no tree is measured
# with half a change; patch leaves no *.orig files behind.
#
# Usage: bash scripts/ab_trees.sh DIR NAME[=PATCH[+PATCH...]] ...
#   e.g. bash scripts/ab_trees.sh .ab base early=bench/results/X/a.patch both=bench/results/X/a.patch+bench/results/X/b.patch
# AB_COMMIT (default HEAD) is the commit every tree starts from. Prints, last, the NAME=TREE arguments for
# fa3_ab.sh and an FA3_AB_COMMIT text that names each tree's commit and patches. DIR/NAME is replaced if it
# exists; the NAME=TREE arguments keep DIR as given (relative, they hold in a copy of the repository too).
# .ab/ is ignored by git: a copy made from git's files leaves it out, so copy it along.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 DIR NAME[=PATCH[+PATCH...]] ..." >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$1
shift
COMMIT=${AB_COMMIT:-HEAD}
sha=$(git -C "$ROOT" rev-parse --short "$COMMIT^{commit}") || { echo "ab_trees: no commit '$COMMIT'" >&2; exit 2; }
mkdir -p "$DIR"

# Stops everything without leaving a half-made tree behind.
fail() {
  echo "ab_trees: $1" >&2
  rm -rf "$tree"
  exit 1
}

args=()
text=()
for spec in "$@"; do
  name=${spec%%=*}
  patches=
  [ "$name" != "$spec" ] && patches=${spec#*=}
  case $name in
    '' | *[!A-Za-z0-9_-]*) echo "ab_trees: a tree name is letters, digits, '-' and '_', got '$name'" >&2; exit 2 ;;
  esac
  tree=$DIR/$name
  rm -rf "$tree"
  mkdir -p "$tree"
  git -C "$ROOT" archive "$sha" | tar -x -C "$tree"
  rm -rf "$tree/bench/results"
  described="$name = $sha"
  if [ -n "$patches" ]; then
    IFS=+ read -r -a list <<<"$patches"
    for patch in "${list[@]}"; do
      # Relative paths are the repository's (where the prepared patches live), absolute ones as they are.
      case $patch in /*) file=$patch ;; *) file=$ROOT/$patch ;; esac
      [ -f "$file" ] || fail "$name: no patch file '$patch'"
      patch -s -p1 -d "$tree" --no-backup-if-mismatch --forward <"$file" >&2 ||
        fail "$name: '$patch' does not apply to $sha (tree removed)"
      described="$described + $(basename "$file")"
    done
  fi
  echo "ab_trees: $tree ($described)"
  args+=("$name=$tree")
  text+=("$described")
done

joined=$(printf '%s; ' "${text[@]}")
echo "FA3_AB_COMMIT='${joined%; }'"
echo "${args[*]}"
