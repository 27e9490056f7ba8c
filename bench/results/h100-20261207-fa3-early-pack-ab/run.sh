#!/usr/bin/env bash
# Device call (~300 s with the machine's start): the candidate patch applied to the copy on the GPU machine,
# then scripts/candidate_ab.sh (one build with both forms, the candidate's fa3 GPU tests and sanitizers, the
# ptxas summary, bench/candidate_ab.py), then the SASS of the head-dim-128 bf16 kernels of both forms (where the
# F2FP packs sit against the P V wait). The patch is against the commit in index.json.
# On the GPU machine: bash bench/results/h100-20261207-fa3-early-pack-ab/run.sh $OUT
# (PATCH=early-pack-candidate.patch for the first form, the one with register copies.)
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CAND_ALGO=fa3 CAND_PATCH="$D/${PATCH:-double-p-candidate.patch}" \
  CAND_SHAPES=${SHAPES:-"128:512:0,128:1024:0,128:2048:0,128:8192:0,128:8192:1,64:1024:1,256:2048:0,256:8192:0,64:8192:0"} \
  CAND_ROUNDS=${ROUNDS:-30} CAND_CALLS=${CALLS:-10} bash scripts/candidate_ab.sh "$1"
obj=$(find build-cand -name 'fa3_fwd_hd128.cu.o' | head -1)
if [ -n "$obj" ] && command -v cuobjdump >/dev/null; then
  cuobjdump -sass "$obj" 2>/dev/null | awk '
    /Function : .*Fa3ConfigILi128ELi2ELi128ELi2ELb1ELb1ELb1ELb0ELb0ELb0ELb[01]EEE13__nv_bfloat16/ {keep=1}
    /Function : / && !/Fa3ConfigILi128ELi2ELi128ELi2ELb1ELb1ELb1ELb0ELb0ELb0ELb[01]EEE13__nv_bfloat16/ {keep=0}
    keep' | gzip > "$1/sass-hd128-bf16.txt.gz"
fi
