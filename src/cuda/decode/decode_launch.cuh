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
  auto* kernel = decode_splitkv_kernel<Cfg, T, false>;
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

// The launch configuration: programmatic stream serialization with pdl, and with cluster > 1 a cluster of
// that many CTAs along x (the tile's splits).
struct LaunchConfig {
  cudaLaunchAttribute attrs[2] = {};
  cudaLaunchConfig_t config{};
  LaunchConfig(int threads, int smem_bytes, dim3 grid, cudaStream_t stream, bool pdl, int cluster) {
    config.gridDim = grid;
    config.blockDim = dim3(unsigned(threads));
    config.dynamicSmemBytes = size_t(smem_bytes);
    config.stream = stream;
    config.attrs = attrs;
    if (pdl) {
      attrs[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs[config.numAttrs].val.programmaticStreamSerializationAllowed = 1;
      ++config.numAttrs;
    }
    if (cluster > 1) {
      attrs[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
      attrs[config.numAttrs].val.clusterDim.x = unsigned(cluster);
      attrs[config.numAttrs].val.clusterDim.y = 1;
      attrs[config.numAttrs].val.clusterDim.z = 1;
      ++config.numAttrs;
    }
  }
};

template <typename Cfg, typename T>
Status launch_typed(const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  LaunchConfig c(Cfg::kThreads, Cfg::kSmemBytes, grid, stream, pdl, 1);
  // cudaLaunchKernelEx returns the launch's own errors (configuration, resources).
  FA_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&c.config, decode_splitkv_kernel<Cfg, T, false>, p));
  return Status::Ok();
}

template <typename Cfg>
Status launch(DType dtype, const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  return dtype == DType::kFloat16 ? launch_typed<Cfg, __half>(p, grid, stream, pdl)
                                  : launch_typed<Cfg, __nv_bfloat16>(p, grid, stream, pdl);
}

// The cluster-merge kernel (sm90): its shared memory, non-portable cluster sizes (above 8) allowed, and how
// many clusters of `cluster` CTAs fit on the device at once.
template <typename Cfg, typename T>
Status cluster_fit_typed(int cluster, int* clusters) {
  auto* kernel = decode_splitkv_kernel<Cfg, T, true>;
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  FA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  LaunchConfig c(Cfg::kThreads, Cfg::kSmemBytes, dim3(unsigned(cluster)), nullptr, false, cluster);
  FA_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveClusters(clusters, kernel, &c.config));
  return Status::Ok();
}

template <typename Cfg>
Status cluster_fit(DType dtype, int cluster, int* clusters) {
  return dtype == DType::kFloat16 ? cluster_fit_typed<Cfg, __half>(cluster, clusters)
                                  : cluster_fit_typed<Cfg, __nv_bfloat16>(cluster, clusters);
}

template <typename Cfg, typename T>
Status launch_cluster_typed(const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  LaunchConfig c(Cfg::kThreads, Cfg::kSmemBytes, grid, stream, pdl, int(grid.x));
  FA_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&c.config, decode_splitkv_kernel<Cfg, T, true>, p));
  return Status::Ok();
}

template <typename Cfg>
Status launch_cluster(DType dtype, const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  return dtype == DType::kFloat16 ? launch_cluster_typed<Cfg, __half>(p, grid, stream, pdl)
                                  : launch_cluster_typed<Cfg, __nv_bfloat16>(p, grid, stream, pdl);
}

template <typename Cfg, bool kWithClusterMerge = false>
DecodeKernel make_kernel() {
  DecodeKernel k;
  k.head_dim = Cfg::kHeadDim;
  k.smem_bytes = Cfg::kSmemBytes;
  k.warps = Cfg::kWarps;
  k.planned_ctas_per_sm = Cfg::kMinBlocksPerSm;
  k.prepare = &prepare<Cfg>;
  k.launch = &launch<Cfg>;
  if (kWithClusterMerge) {
    k.cluster_fit = &cluster_fit<Cfg>;
    k.launch_cluster = &launch_cluster<Cfg>;
  }
  return k;
}

}  // namespace flashattn::cuda::decode
