// The decode kernel set as the host sees it: one entry per head dim (fp16 and bf16 each), and a second,
// wide one for head dim 128, defined in decode_hd{64,128,128_wide,256}.cu so that they compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "cuda/decode/decode_config.cuh"
#include "flashattn/types.h"

namespace flashattn::cuda::decode {

struct DecodeKernel {
  int head_dim = 0;  // 0: no kernel
  int smem_bytes = 0;
  int warps = 0;
  int planned_ctas_per_sm = 0;  // the CTAs per SM its launch bounds and shared memory are sized for
  // Opts the kernel into its shared memory and reports how many CTAs fit on one SM.
  Status (*prepare)(DType dtype, int* ctas_per_sm) = nullptr;
  // pdl: launch with programmatic stream serialization (sm90+), so that the kernel's launch overlaps the
  // end of the kernel before it on the stream (the kernel waits for that one before touching memory).
  Status (*launch)(DType dtype, const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) = nullptr;
  // sm90, nullptr where the kernel has no such form: the form that merges a tile's splits inside one thread
  // block cluster (grid.x = the splits = the cluster size, at most kMaxClusterSplits; no workspace), and how
  // many clusters of a given size fit on the device at once.
  Status (*cluster_fit)(DType dtype, int cluster, int* clusters) = nullptr;
  Status (*launch_cluster)(DType dtype, const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) = nullptr;
};

DecodeKernel decode_kernel_hd64();
DecodeKernel decode_kernel_hd128();
// 8 warps, one CTA per SM: for calls whose tiles fit one wave of it (see use_wide_kernel).
DecodeKernel decode_kernel_hd128_wide();
DecodeKernel decode_kernel_hd256();

}  // namespace flashattn::cuda::decode
