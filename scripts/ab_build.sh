#!/usr/bin/env bash
# Configures and builds several source trees side by side (trees made by scripts/ab_trees.sh), each into
# TREE/build-ab (Release, CUDA on), so that a device call's A/B script does not repeat the build steps.
# Each tree's configure and build output goes to LOGDIR/build-NAME.log (NAME: the tree's folder name, so its
# ptxas -v report is there); prints "build NAME rc N" per tree and, last, the seconds taken.
#
# Usage: bash scripts/ab_build.sh LOGDIR "TARGET [TARGET ...]" TREE [TREE ...]
#   e.g. bash scripts/ab_build.sh $OUT flashattn_cli .ab/base .ab/new
# Environment: JOBS (build jobs per tree; default the CPU count divided by the number of trees, at least 1),
# ARCHS (FLASHATTN_CUDA_ARCHITECTURES, default 90a). Exits 1 when any tree failed to build.
set -uo pipefail

[ $# -ge 3 ] || { echo "usage: $0 LOGDIR \"TARGET ...\" TREE [TREE ...]" >&2; exit 2; }
LOGDIR=$1
read -r -a targets <<<"$2"
shift 2
mkdir -p "$LOGDIR"
t0=$(date +%s)
jobs=${JOBS:-$(( $(nproc) / $# ))}
[ "$jobs" -ge 1 ] || jobs=1
pids=() names=()
for tree in "$@"; do
  name=$(basename "$tree")
  log=$LOGDIR/build-$name.log
  ( cmake -S "$tree" -B "$tree/build-ab" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
      "-DFLASHATTN_CUDA_ARCHITECTURES=${ARCHS:-90a}" >"$log" 2>&1 &&
      cmake --build "$tree/build-ab" -j "$jobs" --target "${targets[@]}" >>"$log" 2>&1 ) &
  pids+=($!)
  names+=("$name")
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  r=$?
  echo "build ${names[$i]} rc $r"
  [ $r -eq 0 ] || rc=1
done
echo "built in $(( $(date +%s) - t0 )) s"
exit $rc
