// Host-side pieces shared by the fa1 launch files: the built head-dim instances, the workspace buffer,
// and the launch functions each direction's translation unit instantiates (fa1_fwd.cu, fa1_bwd.cu).
// The directions compile separately so that no file takes more than about a minute on one core.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/stream_buffer.h"
#include "cuda/launch.h"

namespace flashattn::cuda::fa1 {

// Built head-dim instances; a head_dim runs on the smallest one at least as large (columns beyond
// head_dim are zero-filled in shared memory and never written out).
constexpr int kInstanceHeadDims[] = {64, 128};

inline int instance_head_dim(int64_t head_dim) {
  for (int d : kInstanceHeadDims)
    if (head_dim <= d) return d;
  return 0;
}

// Rows of the fp32 workspaces per head: every packed row (varlen) or batch * seqlen_q. Varlen rows after the
// last sequence are never visited by the main kernels, so the final passes write them as rows that saw no key.
inline int64_t workspace_rows(const detail::Problem& p) { return p.total_q; }

// Whole 16-byte vectors can be loaded when head_dim is a multiple of 8 and every row start is 16-byte aligned.
inline bool vector_loads_ok(const detail::Problem& p) {
  constexpr int kElems = 8, kBytes = 16;
  if (p.head_dim % kElems != 0) return false;
  auto ok = [](const detail::Strided& t) {
    return reinterpret_cast<uintptr_t>(t.ptr) % kBytes == 0 && t.batch_stride % kElems == 0 &&
           t.row_stride % kElems == 0 && t.head_stride % kElems == 0;
  };
  return ok(p.q) && ok(p.k) && ok(p.v) && (!p.backward || ok(p.dout));
}

// Opts a kernel into more than the default 48 KB of dynamic shared memory when it needs it.
template <typename Kernel>
Status allow_smem(Kernel kernel, size_t bytes) {
  constexpr size_t kDefaultSmem = 48 * 1024;
  if (bytes > kDefaultSmem)
    FA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  return Status::Ok();
}

// Shared memory of one block, for the support check.
size_t forward_smem(int head_dim_instance, size_t elem);
size_t backward_smem(int head_dim_instance, size_t elem);

// Run one direction for T in {__half, __nv_bfloat16} and kD in kInstanceHeadDims.
template <typename T, int kD>
Status run_forward(const detail::Problem& p, const Context& ctx);
template <typename T, int kD>
Status run_backward(const detail::Problem& p, const Context& ctx);

}  // namespace flashattn::cuda::fa1
