// Turns a DecodeConfig into a DecodeKernel entry (included by decode_hd*.cu only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.h"
#include "cuda/decode/decode_kernel.cuh"
#include "cuda/decode/decode_kernels.h"

namespace flashattn::cuda::decode {

// The kernel's attributes, set before every query and launch (cheap, and they do not survive a device
// reset): its shared memory, and for the cluster form non-portable cluster sizes (above 8).
template <typename Cfg, typename T, bool kClusterMerge>
Status set_attributes() {
  auto* kernel = decode_splitkv_kernel<Cfg, T, kClusterMerge>;
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  if (kClusterMerge)
    FA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  return Status::Ok();
}

template <typename Cfg, typename T>
Status prepare_typed(int* ctas_per_sm) {
  const Status s = set_attributes<Cfg, T, false>();
  if (!s.ok()) return s;
  FA_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      ctas_per_sm, decode_splitkv_kernel<Cfg, T, false>, Cfg::kThreads, Cfg::kSmemBytes));
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

// The cluster form (sm90): how many clusters of `cluster` CTAs fit on the device at once.
template <typename Cfg, typename T>
Status cluster_fit_typed(int cluster, int* clusters) {
  const Status s = set_attributes<Cfg, T, true>();
  if (!s.ok()) return s;
  LaunchConfig c(Cfg::kThreads, Cfg::kSmemBytes, dim3(unsigned(cluster)), nullptr, false, cluster);
  FA_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveClusters(clusters, decode_splitkv_kernel<Cfg, T, true>, &c.config));
  return Status::Ok();
}

template <typename Cfg>
Status cluster_fit(DType dtype, int cluster, int* clusters) {
  return dtype == DType::kFloat16 ? cluster_fit_typed<Cfg, __half>(cluster, clusters)
                                  : cluster_fit_typed<Cfg, __nv_bfloat16>(cluster, clusters);
}

// kClusterMerge: one cluster of grid.x CTAs (the tile's splits) per tile.
template <typename Cfg, typename T, bool kClusterMerge>
Status launch_typed(const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  if (kClusterMerge) {
    const Status s = set_attributes<Cfg, T, true>();
    if (!s.ok()) return s;
  }
  LaunchConfig c(Cfg::kThreads, Cfg::kSmemBytes, grid, stream, pdl, kClusterMerge ? int(grid.x) : 1);
  // cudaLaunchKernelEx returns the launch's own errors (configuration, resources).
  FA_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&c.config, decode_splitkv_kernel<Cfg, T, kClusterMerge>, p));
  return Status::Ok();
}

template <typename Cfg, bool kClusterMerge>
Status launch(DType dtype, const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  return dtype == DType::kFloat16 ? launch_typed<Cfg, __half, kClusterMerge>(p, grid, stream, pdl)
                                  : launch_typed<Cfg, __nv_bfloat16, kClusterMerge>(p, grid, stream, pdl);
}

template <typename Cfg, bool kWithClusterMerge = false>
DecodeKernel make_kernel() {
  DecodeKernel k;
  k.head_dim = Cfg::kHeadDim;
  k.smem_bytes = Cfg::kSmemBytes;
  k.warps = Cfg::kWarps;
  k.planned_ctas_per_sm = Cfg::kMinBlocksPerSm;
  k.prepare = &prepare<Cfg>;
  k.launch = &launch<Cfg, false>;
  if (kWithClusterMerge) {
    k.cluster_fit = &cluster_fit<Cfg>;
    k.launch_cluster = &launch<Cfg, true>;
  }
  return k;
}

}  // namespace flashattn::cuda::decode
