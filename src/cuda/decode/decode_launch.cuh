// Turns a DecodeConfig into a DecodeKernel entry (included by decode_hd*.cu only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.h"
#include "cuda/decode/decode_kernel.cuh"
#include "cuda/decode/decode_kernels.h"

namespace flashattn::cuda::decode {

template <typename Cfg, typename T>
Status prepare_typed(int* ctas_per_sm) {
  auto* kernel = decode_splitkv_kernel<Cfg, T>;
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  FA_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, kernel, Cfg::kThreads, Cfg::kSmemBytes));
  return Status::Ok();
}

template <typename Cfg>
Status prepare(DType dtype, int* ctas_per_sm) {
  return dtype == DType::kFloat16 ? prepare_typed<Cfg, __half>(ctas_per_sm)
                                  : prepare_typed<Cfg, __nv_bfloat16>(ctas_per_sm);
}

template <typename Cfg, typename T>
Status launch_typed(const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(Cfg::kThreads);
  config.dynamicSmemBytes = Cfg::kSmemBytes;
  config.stream = stream;
  config.attrs = pdl ? &attr : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  // cudaLaunchKernelEx returns the launch's own errors (configuration, resources).
  FA_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, decode_splitkv_kernel<Cfg, T>, p));
  return Status::Ok();
}

template <typename Cfg>
Status launch(DType dtype, const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  return dtype == DType::kFloat16 ? launch_typed<Cfg, __half>(p, grid, stream, pdl)
                                  : launch_typed<Cfg, __nv_bfloat16>(p, grid, stream, pdl);
}

template <typename Cfg>
DecodeKernel make_kernel() {
  DecodeKernel k;
  k.head_dim = Cfg::kHeadDim;
  k.smem_bytes = Cfg::kSmemBytes;
  k.warps = Cfg::kWarps;
  k.planned_ctas_per_sm = Cfg::kMinBlocksPerSm;
  k.prepare = &prepare<Cfg>;
  k.launch = &launch<Cfg>;
  return k;
}

}  // namespace flashattn::cuda::decode
