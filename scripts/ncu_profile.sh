#!/usr/bin/env bash
# Nsight Compute reports of the main kernels, one problem each, through the CLI (`flashattn run`).
#
# Usage: bash scripts/ncu_profile.sh [results-dir] [profile ...]
#   profiles: the names in PROFILES below (default: all)
# For each profile it writes <profile>.txt (the sections below, one launch after warm-up) and
# <profile>_sass.csv.gz (per-instruction samples: where the warps stall).
# sdpa_flash_* profiles PyTorch's flash backend (the peer of fa2), sdpa_cudnn_* its cuDNN backend (the peer
# of fa3), on the same shape as ours, for a side-by-side reading of the kernels; they need torch with CUDA. Clocks are left as
# they are (--clock-control none). Environment: FLASHATTN_BUILD_DIR (default build-gpu-check; built here
# with FLASHATTN_CUDA_ARCHITECTURES, default 90a, when it holds no CLI), NCU (default ncu on PATH or in
# /usr/local/cuda/bin).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/bench/results/ncu-$(date -u +%Y%m%d-%H%M%S)}
shift || true
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUILD=${FLASHATTN_BUILD_DIR:-$ROOT/build-gpu-check}
export PATH=$PATH:/usr/local/cuda/bin
NCU=${NCU:-$(command -v ncu || true)}
[ -n "$NCU" ] || { echo "ncu_profile: no ncu on PATH or in /usr/local/cuda/bin" >&2; exit 1; }

if [ ! -x "$BUILD/flashattn" ]; then
  GEN=()
  command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
        "-DFLASHATTN_CUDA_ARCHITECTURES=${FLASHATTN_CUDA_ARCHITECTURES:-90a}" >"$OUT/ncu_build.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" --target flashattn_cli >>"$OUT/ncu_build.log" 2>&1 ||
    { echo "ncu_profile: build failed ($OUT/ncu_build.log)" >&2; exit 1; }
fi
CLI=$BUILD/flashattn

SECTIONS=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats
          --section InstructionStats --section SourceCounters)

# name ; kernel regex ; flashattn run arguments (or: sdpa backend direction batch heads seqlen head_dim)
PROFILES=(
  "fa3_d128_n8192;fa3_fwd_kernel;--algo fa3 --batch 2 --heads 16 --head-dim 128 --seqlen-q 8192"
  "fa3_d128_n512;fa3_fwd_kernel;--algo fa3 --batch 32 --heads 16 --head-dim 128 --seqlen-q 512"
  "fa3_d64_n8192;fa3_fwd_kernel;--algo fa3 --batch 2 --heads 32 --head-dim 64 --seqlen-q 8192"
  "fa3_d256_n8192;fa3_fwd_kernel;--algo fa3 --batch 2 --heads 8 --head-dim 256 --seqlen-q 8192"
  "fa3_d128_n8192_causal;fa3_fwd_kernel;--algo fa3 --batch 2 --heads 16 --head-dim 128 --seqlen-q 8192 --causal"
  "decode_b1_32k;decode_splitkv_kernel;--kv-cache --batch 1 --heads 32 --heads-kv 8 --head-dim 128 --cache-len 32768"
  "decode_b64_4k;decode_splitkv_kernel;--kv-cache --batch 64 --heads 32 --heads-kv 8 --head-dim 128 --cache-len 4096"
  "fa2_bwd_d64_n8192;dkdv_kernel;--algo fa2 --batch 2 --heads 32 --head-dim 64 --seqlen-q 8192 --backward"
  "fa2_bwd_d128_n8192;dkdv_kernel;--algo fa2 --batch 2 --heads 16 --head-dim 128 --seqlen-q 8192 --backward"
  "fa2_bwd_d256_n8192;dkdv_kernel;--algo fa2 --batch 2 --heads 8 --head-dim 256 --seqlen-q 8192 --backward"
  "sdpa_flash_bwd_d64_n8192;flash_bwd_dq_dk_dv;sdpa flash both 2 32 8192 64"
  "sdpa_flash_bwd_d128_n8192;flash_bwd_dq_dk_dv;sdpa flash both 2 16 8192 128"
  "sdpa_flash_bwd_d256_n8192;flash_bwd_dq_dk_dv;sdpa flash both 2 8 8192 256"
  "fa2_fwd_d256_n8192;fa2_fwd_kernel;--algo fa2 --batch 2 --heads 8 --head-dim 256 --seqlen-q 8192"
  "fa2_fwd_d64_n512;fa2_fwd_kernel;--algo fa2 --batch 32 --heads 32 --head-dim 64 --seqlen-q 512"
  "sdpa_flash_fwd_d64_n512;flash_fwd_kernel;sdpa flash fwd 32 32 512 64"
  "sdpa_flash_fwd_d256_n8192;flash_fwd_kernel;sdpa flash both 2 8 8192 256"
  "sdpa_cudnn_fwd_d128_n512;cudnn|sdpa|fprop;sdpa cudnn fwd 32 16 512 128"
  "fa3_d64_n512_causal;fa3_fwd_kernel;--algo fa3 --batch 32 --heads 32 --head-dim 64 --seqlen-q 512 --causal"
  "sdpa_cudnn_fwd_d64_n512_causal;cudnn|sdpa|fprop;sdpa cudnn fwd 32 32 512 64 causal"
  "sdpa_cudnn_fwd_d128_n8192;cudnn|sdpa|fprop;sdpa cudnn fwd 2 16 8192 128"
  "decode_b16_8k;decode_splitkv_kernel;--kv-cache --batch 16 --heads 32 --heads-kv 8 --head-dim 128 --cache-len 8192"
  "decode_b1_128k;decode_splitkv_kernel;--kv-cache --batch 1 --heads 32 --heads-kv 8 --head-dim 128 --cache-len 131072"
  "sdpa_cudnn_decode_b1_32k;fprop;sdpa cudnn decode 1 32 8 32768 128"
  "sdpa_cudnn_decode_b1_128k;fprop;sdpa cudnn decode 1 32 8 131072 128"
  "sdpa_cudnn_decode_b16_8k;fprop;sdpa cudnn decode 16 32 8 8192 128"
  "sdpa_cudnn_decode_b64_4k;fprop;sdpa cudnn decode 64 32 8 4096 128"
)

# PyTorch SDPA (bf16, three calls) on: backend (flash|cudnn) direction (fwd|both) batch heads seqlen head_dim
# [causal]; or backend decode batch heads_q heads_kv seqlen_k head_dim (one query token, GQA, as the decode
# benchmark calls it).
SDPA_PY=$OUT/sdpa_once.py
cat >"$SDPA_PY" <<'PY'
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[sys.argv[1]]
torch.manual_seed(1)
if sys.argv[2] == "decode":
    b, hq, hkv, n, d = map(int, sys.argv[3:8])
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    with sdpa_kernel(backend), torch.no_grad():
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
    sys.exit(0)
grad = sys.argv[2] == "both"
b, h, n, d = map(int, sys.argv[3:7])
causal = len(sys.argv) > 7 and sys.argv[7] == "causal"
q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=grad) for _ in range(3))
g = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
with sdpa_kernel(backend):
    for _ in range(3):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if grad:
            out.backward(g)
torch.cuda.synchronize()
PY

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w
  for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

rc=0
for entry in "${PROFILES[@]}"; do
  IFS=';' read -r name kernel args <<<"$entry"
  selected "$name" || continue
  echo "ncu_profile: $name"
  rep="$OUT/$name"
  if [[ $args == sdpa\ * ]]; then
    # shellcheck disable=SC2206
    cmd=(python3 "$SDPA_PY" ${args#sdpa })
  else
    # shellcheck disable=SC2206
    cmd=("$CLI" run $args --repeat 1 --warmup 2 --samples 2 --seed 1)
  fi
  if ! "$NCU" --clock-control none -k "regex:$kernel" -s 2 -c 1 "${SECTIONS[@]}" --import-source no \
       -f -o "$rep" "${cmd[@]}" >"$rep.log" 2>&1; then
    echo "ncu_profile: $name failed ($rep.log)" >&2
    rc=1
    continue
  fi
  "$NCU" --import "$rep.ncu-rep" --print-details all >"$rep.txt" 2>&1
  cat "$rep.log" >>"$rep.txt"
  "$NCU" --import "$rep.ncu-rep" --page source --print-source sass --csv 2>/dev/null | gzip -9 >"$rep"_sass.csv.gz
  rm -f "$rep.ncu-rep" "$rep.log"
done
rm -f "$SDPA_PY"
exit $rc
