#!/usr/bin/env bash
# One line on what ptxas -v reported in a build log: kernel builds, how many of them spill, the wgmma waits
# ptxas injected of its own (C7517: before a read of accumulator registers, serializing whatever was meant to
# run under the wgmma in flight there) and the kernels whose wgmma it serialized outright (C7510-C7516,
# C7518 and the like; each message says why). Used by scripts/fa3_ab.sh and scripts/fa3_candidate.sh.
#
# Usage: bash scripts/ptxas_summary.sh BUILD_LOG
set -uo pipefail
log=$1
echo "$(grep -c 'Compiling entry function' "$log") kernel builds, $(grep -c '[1-9][0-9]* bytes spill stores' "$log")" \
  "with spill stores, $(grep -c '(C7517)' "$log") injected wgmma waits (ptxas C7517)," \
  "$(grep -c 'wgmma.mma_async instructions are serialized' "$log") wgmma serializations"
