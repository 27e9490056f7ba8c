#!/usr/bin/env bash
# The CPU library, the CLI and the CPU tests built with AddressSanitizer (leak checks included) and
# UndefinedBehaviorSanitizer, then every test of that build run under them: out-of-bounds reads and writes,
# use after free, leaks, signed overflow, misaligned or null accesses and the like fail the test that
# caused them. No CUDA (the GPU kernels have compute-sanitizer in scripts/gpu_check.sh).
#
# Usage: bash scripts/cpu_sanitizers.sh [build-dir]        (default build-sanitize)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-sanitize}
jobs=$(nproc)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
sanitize="-fsanitize=address,undefined"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHATTN_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$sanitize -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitize" >/dev/null
cmake --build "$build" -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$build" --output-on-failure -j"$jobs"
