#!/usr/bin/env bash
# Device call (~250 s: the CLI build ~120 s on 16 cores, then 8 ncu profiles of one launch each): Nsight
# Compute reports of our decode kernel and SDPA cuDNN's fprop kernel on the four decode shapes
# (scripts/ncu_profile.sh), packed into OUT/ncu.tar.gz.
# On the GPU machine: bash bench/results/h100-20261207-decode-ncu/run.sh $OUT
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
OUT=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
mkdir -p "$OUT/ncu"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } |
  tee "$OUT/ncu/gpu.txt"
bash "$ROOT/scripts/ncu_profile.sh" "$OUT/ncu" decode_b1_32k decode_b1_128k decode_b16_8k decode_b64_4k \
  sdpa_cudnn_decode_b1_32k sdpa_cudnn_decode_b1_128k sdpa_cudnn_decode_b16_8k sdpa_cudnn_decode_b64_4k
echo "ncu_profile rc=$?"
for f in "$OUT"/ncu/*.txt; do
  echo "== $(basename "$f")"
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Grid Size|Block Size|Registers Per|Achieved Occupancy|Mem Busy|Max Bandwidth" "$f" | head -n 14
done
tar -czf "$OUT/ncu.tar.gz" -C "$OUT" ncu && rm -rf "${OUT:?}/ncu"
