// Per-CTA timestamps for bench/decode_lab: scripts/decode_lab.py inserts calls to these into a copy of
// src/cuda/decode/decode_kernel.cuh. Null pointers (the default) record nothing.
#pragma once
struct LabProbe { unsigned long long t0, t1, t2; unsigned smid; unsigned pad; };
__device__ LabProbe* g_lab_probe = nullptr;
__device__ unsigned long long* g_lab_merge = nullptr;
__device__ __forceinline__ unsigned long long lab_gtime() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
__device__ __forceinline__ void lab_probe(unsigned long long t0, unsigned long long t1) {
  if (g_lab_probe == nullptr || threadIdx.x != 0) return;
  unsigned smid; asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  g_lab_probe[cta] = LabProbe{t0, t1, lab_gtime(), smid, 0};
}
__device__ __forceinline__ void lab_probe_merge(int tile) {
  __syncthreads();
  if (g_lab_merge == nullptr || threadIdx.x != 0) return;
  g_lab_merge[tile] = lab_gtime();
}
__device__ int g_lab_skip = 0;  // nonzero: the key loop skips its arithmetic (loads only)
