#!/usr/bin/env bash
# The fa3 overlap table of scripts/sass_overlap.awk, demangled: reads `cuobjdump --dump-sass` output from
# the file given (or stdin) and prints "GOOD BAD INSTRUCTIONS  KERNEL" per fa3 kernel build, the name cut to
# 160 characters. Used by scripts/gpu_check.sh and scripts/fa3_ab.sh.
set -uo pipefail
demangle() { if command -v c++filt >/dev/null 2>&1; then c++filt; elif command -v cu++filt >/dev/null 2>&1; then cu++filt; else cat; fi; }
awk -f "$(dirname "${BASH_SOURCE[0]}")/sass_overlap.awk" "${1:-/dev/stdin}" | demangle |
  awk -F'\t' '{ printf "%s  %s\n", $1, substr($2, 1, 160) }'
