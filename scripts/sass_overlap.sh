#!/usr/bin/env bash
# The fa3 overlap table of scripts/sass_overlap.awk, demangled: reads `cuobjdump --dump-sass` output from
# the file given (or stdin) and prints "GOOD BAD INSTRUCTIONS  KERNEL" per fa3 kernel build, the name cut to
# 160 characters. Used by scripts/gpu_check.sh and scripts/fa3_ab.sh.
set -uo pipefail
dir=$(dirname "${BASH_SOURCE[0]}")
awk -f "$dir/sass_overlap.awk" "${1:-/dev/stdin}" | bash "$dir/demangle.sh" --rows
