// The CUDA algorithms the dispatcher can call. Each one checks what it supports (`*_supports`, which
// also names the kernel it would run) and launches on ctx.stream. Every function is implemented in the
// folder of its algorithm.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "api/problem.h"

namespace flashattn::cuda {

struct Context {
  cudaStream_t stream = nullptr;
  int device = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t smem_optin = 0;  // max dynamic shared memory per block after opt-in
};

// `standard`: S = QK^T and dP through cuBLAS into device memory, softmax kernels in between (standard/).
Status standard_supports(const detail::Problem& p, const Context& ctx, std::string* kernel);
Status standard_forward(const detail::Problem& p, const Context& ctx);
Status standard_backward(const detail::Problem& p, const Context& ctx);

// `fa1`: FlashAttention-1 loop order, KV tiles outer, Q tiles inner, O and row stats in HBM (sm80/).
Status fa1_supports(const detail::Problem& p, const Context& ctx, std::string* kernel);
Status fa1_forward(const detail::Problem& p, const Context& ctx);
Status fa1_backward(const detail::Problem& p, const Context& ctx);

// `fa2`: query-parallel, sliced-Q warps, cp.async + ldmatrix + mma.sync (sm80/).
Status fa2_supports(const detail::Problem& p, const Context& ctx, std::string* kernel);
Status fa2_forward(const detail::Problem& p, const Context& ctx);
Status fa2_backward_supports(const detail::Problem& p, const Context& ctx, std::string* kernel);
Status fa2_backward(const detail::Problem& p, const Context& ctx);

}  // namespace flashattn::cuda
