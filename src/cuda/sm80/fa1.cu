// The `fa1` algorithm: FlashAttention-1's loop order (KV tiles outer, query tiles inner) with its output
// and row statistics (forward) or dQ (backward) kept in fp32 device memory between outer steps. Kernels:
// fa1_fwd_kernel.cuh and fa1_bwd_kernel.cuh; launches: fa1_fwd.cu and fa1_bwd.cu. This file decides what
// is supported and picks the instance.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <string>

#include "cuda/launch.h"
#include "cuda/sm80/fa1_launch.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kMinComputeMajor = 8;   // mma.sync with bf16 operands needs sm_80
constexpr int64_t kMaxGridY = 65535;  // the batch is the grid's y dimension
constexpr int64_t kMaxHeadDim = 128;

template <typename T>
Status run(const detail::Problem& p, const Context& ctx) {
  switch (fa1::instance_head_dim(p.head_dim)) {
    case 64: return p.backward ? fa1::run_backward<T, 64>(p, ctx) : fa1::run_forward<T, 64>(p, ctx);
    case 128: return p.backward ? fa1::run_backward<T, 128>(p, ctx) : fa1::run_forward<T, 128>(p, ctx);
    default: return Status::NotSupported("algorithm fa1: head_dim " + std::to_string(p.head_dim) + " is not built");
  }
}

// The dispatcher has called fa1_supports on this problem before it runs it.
Status run_dtype(const detail::Problem& p, const Context& ctx) {
  if (p.dtype == DType::kFloat16) return run<__half>(p, ctx);
  if (p.dtype == DType::kBFloat16) return run<__nv_bfloat16>(p, ctx);
  return Status::NotSupported("algorithm fa1: fp16 and bf16 only");
}

}  // namespace

Status fa1_supports(const detail::Problem& p, const Context& ctx, std::string* kernel) {
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    return Status::NotSupported(std::string("algorithm fa1: dtype ") + to_string(p.dtype) +
                                " is not built (fp16 and bf16 only)");
  if (p.head_dim > kMaxHeadDim)
    return Status::NotSupported("algorithm fa1: head_dim " + std::to_string(p.head_dim) + " > " +
                                std::to_string(kMaxHeadDim) + " is not built");
  if (ctx.cc_major < kMinComputeMajor)
    return Status::NotSupported("algorithm fa1: needs compute capability 8.0 or newer, the device has " +
                                std::to_string(ctx.cc_major) + "." + std::to_string(ctx.cc_minor));
  if (p.batch > kMaxGridY)
    return Status::NotSupported("algorithm fa1: batch " + std::to_string(p.batch) + " > " + std::to_string(kMaxGridY));
  if (p.total_q > INT_MAX || p.total_k > INT_MAX)
    return Status::NotSupported("algorithm fa1: sequence lengths must fit in 32-bit ints");
  const int d = fa1::instance_head_dim(p.head_dim);
  const size_t elem = size_t(dtype_size(p.dtype));
  const size_t smem = p.backward ? fa1::backward_smem(d, elem) : fa1::forward_smem(d, elem);
  if (smem > ctx.smem_optin)
    return Status::NotSupported("algorithm fa1: needs " + std::to_string(smem) +
                                " bytes of shared memory per block, the device allows " + std::to_string(ctx.smem_optin));
  if (kernel)
    *kernel = std::string("fa1_") + (p.backward ? "bwd" : "fwd") + "_sm80_" +
              (p.dtype == DType::kFloat16 ? "fp16" : "bf16") + "_hd" + std::to_string(d);
  return Status::Ok();
}

Status fa1_forward(const detail::Problem& p, const Context& ctx) { return run_dtype(p, ctx); }
Status fa1_backward(const detail::Problem& p, const Context& ctx) { return run_dtype(p, ctx); }

}  // namespace flashattn::cuda
