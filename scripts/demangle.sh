#!/usr/bin/env bash
# Demangles the C++ names on stdin (c++filt, else cu++filt, else unchanged). With --rows, each line is
# "COLUMNS<tab>NAME" and comes out as "COLUMNS  NAME" with the name cut to 160 characters: the kernel
# tables of scripts/gpu_check.sh and scripts/sass_overlap.sh.
set -uo pipefail
if command -v c++filt >/dev/null 2>&1; then filt=(c++filt)
elif command -v cu++filt >/dev/null 2>&1; then filt=(cu++filt)
else filt=(cat); fi
if [ "${1:-}" = --rows ]; then
  "${filt[@]}" | awk -F'\t' '{ printf "%s  %s\n", $1, substr($2, 1, 160) }'
else
  "${filt[@]}"
fi
