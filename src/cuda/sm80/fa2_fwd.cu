// Host side of the FA2 forward: which problems the sm80+ kernels accept, the kernel set, and the launch.
//
// Kernel set: fp16 and bf16 x head dims {64, 96, 128, 192, 256}. A head dim below 256 that is not in the
// set but is a multiple of 8 runs on the next larger kernel: its loads zero-fill the extra columns (the
// dot products and P V are unchanged by zeros) and its stores skip them. Other head dims are refused.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "cuda/common/candidate.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/problem_params.cuh"
#include "cuda/launch.h"
#include "cuda/sm80/fa2_fwd_kernel.cuh"

namespace flashattn::cuda {
namespace {

using fa2::FwdConfig;

// One tile configuration per head dim: <head_dim, kBlockM, kBlockN, warps, min CTAs per SM, K/V buffers>.
// Up to 128, four warps own 32 rows each (two slices): every K/V fragment read from shared memory feeds
// two mma tiles. Beyond 128 the O accumulator of 32 rows would not fit in registers, so warps own 16 rows
// each, four to a 64-row tile, with single K and V buffers so that two CTAs share an SM (99 KB of shared
// memory each at head dim 256): one CTA's loads and barriers then overlap the other's GEMMs. Against eight
// warps on 128-row tiles with double buffers (one CTA per SM, the same instruction count; Nsight Compute
// had it waiting on its copies and barriers) this is 5-7% faster at head dim 256, 5-13% under a causal
// mask (H200, bench/results/h200-20261202-epilogue-ab/); eight warps on 128-row tiles with single buffers (one
// CTA per SM, PyTorch FA2's tile at this head dim on sm90) 7-11% slower, timed in one process against this
// tile (H100, bench/results/h100-20261207-fa2-d256-candidate-ab/).
// K and V in swizzled dense rows (fa2_common.cuh) at head dims 192 and 256 only: at 256 they measured 3-7%
// faster than padded rows, at 64 and 128 3% and 5% slower (geometric means over the sweep; H200,
// bench/results/h200-20261202-fa2-swizzle-ab/); head dim 96 has no whole groups of 8 chunks to swizzle.
using Fwd64 = FwdConfig<64, 128, 64, 4, 2>;
using Fwd96 = FwdConfig<96, 128, 64, 4, 2>;
using Fwd128 = FwdConfig<128, 128, 64, 4, 2>;
using Fwd192 = FwdConfig<192, 64, 64, 4, 2, 1, /*kSwizzleKv=*/true>;
using Fwd256 = FwdConfig<256, 64, 64, 4, 2, 1, /*kSwizzleKv=*/true>;

constexpr int kMinComputeCapability = 8;
constexpr int kGridYZLimit = 65535;  // gridDim.y (heads) and gridDim.z (batch)
constexpr int kDefaultSmemBytes = 48 * 1024;  // above this a kernel must opt in
constexpr int64_t kCpAsyncAlign = 16;

struct KernelShape {
  int head_dim = 0, block_m = 0, block_n = 0, warps = 0, smem_bytes = 0;
};

template <typename Cfg>
KernelShape shape_of_form() {
  return KernelShape{Cfg::kHeadDim, Cfg::kBlockM, Cfg::kBlockN, Cfg::kWarps, Cfg::kSmemBytes};
}

// The shape of the form that runs: the candidate's (FwdCandidateOf may change the tile) where the build has
// one and the call asks for it, so that its name and shared-memory check are its own.
template <typename Cfg>
KernelShape shape_of() {
#if defined(FLASHATTN_FA2_CANDIDATE)
  if (fa2_candidate_requested()) return shape_of_form<typename fa2::FwdCandidateOf<Cfg>::type>();
#endif
  return shape_of_form<Cfg>();
}

// The kernel that serves head_dim (padded up when needed); head_dim 0 when none does.
KernelShape kernel_shape(int64_t head_dim) {
  if (head_dim <= 64) return shape_of<Fwd64>();
  if (head_dim <= 96) return shape_of<Fwd96>();
  if (head_dim <= 128) return shape_of<Fwd128>();
  if (head_dim <= 192) return shape_of<Fwd192>();
  if (head_dim <= 256) return shape_of<Fwd256>();
  return {};
}

const char* dtype_tag(DType dtype) { return dtype == DType::kFloat16 ? "fp16" : "bf16"; }

// cp.async moves 16-byte chunks: the base pointer and every stride that moves between rows must keep
// 16-byte alignment. A stride of a dimension of extent 1 is never applied, so it does not matter.
Status check_alignment(const char* name, const detail::Strided& s, int64_t rows, int64_t heads, int64_t batch,
                       bool varlen) {
  const int64_t elem = 2;  // fp16 / bf16
  auto bad = [&](const char* what, int64_t stride) {
    return Status::NotSupported(std::string("algorithm fa2: ") + name + " " + what + " stride " +
                                std::to_string(stride) + " elements is not a multiple of 16 bytes (cp.async " +
                                "needs 16-byte aligned rows)");
  };
  if (reinterpret_cast<uintptr_t>(s.ptr) % kCpAsyncAlign != 0)
    return Status::NotSupported(std::string("algorithm fa2: ") + name +
                                " data pointer is not 16-byte aligned (cp.async needs 16-byte aligned rows)");
  if (rows > 1 && (s.row_stride * elem) % kCpAsyncAlign != 0) return bad("row", s.row_stride);
  if (s.row_stride > fa2::kMaxTileRowStride)
    return Status::NotSupported(std::string("algorithm fa2: ") + name + " row stride " +
                                std::to_string(s.row_stride) + " elements exceeds " +
                                std::to_string(fa2::kMaxTileRowStride) +
                                " (tiles are addressed with 32-bit offsets)");
  if (heads > 1 && (s.head_stride * elem) % kCpAsyncAlign != 0) return bad("head", s.head_stride);
  if (!varlen && batch > 1 && (s.batch_stride * elem) % kCpAsyncAlign != 0) return bad("batch", s.batch_stride);
  return Status::Ok();
}

template <typename Cfg, typename T>
Status launch(const detail::Problem& prob, const Context& ctx) {
  const AttnParams params = make_params(prob);
  auto* kernel = params.softcap > 0.0f ? fa2::fa2_fwd_kernel<Cfg, T, true> : fa2::fa2_fwd_kernel<Cfg, T, false>;
  if (Cfg::kSmemBytes > kDefaultSmemBytes)
    FA_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const dim3 grid(unsigned((prob.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM), unsigned(prob.heads_q),
                  unsigned(prob.batch));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, ctx.stream>>>(params);
  FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa2_fwd_kernel");
  return Status::Ok();
}

// The shipped configuration, or its candidate form where the build has one and the call asks for it.
template <typename Cfg, typename T>
Status launch_form(const detail::Problem& prob, const Context& ctx) {
#if defined(FLASHATTN_FA2_CANDIDATE)
  if (fa2_candidate_requested()) return launch<typename fa2::FwdCandidateOf<Cfg>::type, T>(prob, ctx);
#endif
  return launch<Cfg, T>(prob, ctx);
}

template <typename T>
Status launch_for_head_dim(const detail::Problem& prob, const Context& ctx) {
  switch (kernel_shape(prob.head_dim).head_dim) {
    case 64: return launch_form<Fwd64, T>(prob, ctx);
    case 96: return launch_form<Fwd96, T>(prob, ctx);
    case 128: return launch_form<Fwd128, T>(prob, ctx);
    case 192: return launch_form<Fwd192, T>(prob, ctx);
    case 256: return launch_form<Fwd256, T>(prob, ctx);
    default: return Status::NotSupported("algorithm fa2: no kernel for head_dim " + std::to_string(prob.head_dim));
  }
}

}  // namespace

Status fa2_supports(const detail::Problem& p, const Context& ctx, std::string* kernel) {
  if (p.backward) return Status::NotSupported("algorithm fa2: the forward kernels do not run backward");
  if (ctx.cc_major < kMinComputeCapability)
    return Status::NotSupported("algorithm fa2: needs compute capability >= 8.0 (cp.async, bf16 mma.sync), device "
                                "has " + std::to_string(ctx.cc_major) + "." + std::to_string(ctx.cc_minor));
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    return Status::NotSupported(std::string("dtype ") + to_string(p.dtype) +
                                " is not supported by algorithm fa2 (fp16, bf16)");
  const KernelShape shape = kernel_shape(p.head_dim);
  if (shape.head_dim == 0)
    return Status::NotSupported("algorithm fa2: head_dim " + std::to_string(p.head_dim) +
                                " > 256 is not supported (kernels for 64, 96, 128, 192, 256)");
  if (p.head_dim % fa2::kChunkElems != 0)
    return Status::NotSupported("algorithm fa2: head_dim " + std::to_string(p.head_dim) +
                                " must be a multiple of 8 (16-byte cp.async rows); kernels exist for 64, 96, "
                                "128, 192, 256 and multiples of 8 pad up to the next one");
  if (p.heads_q > kGridYZLimit || p.batch > kGridYZLimit)
    return Status::NotSupported("algorithm fa2: heads_q (" + std::to_string(p.heads_q) + ") and batch (" +
                                std::to_string(p.batch) + ") must each be at most 65535 (grid limit)");
  if (p.total_q > INT_MAX || p.total_k > INT_MAX)
    return Status::NotSupported("algorithm fa2: more than 2^31 - 1 query or key rows are not supported");
  // The per-element mask forms its key bounds in 32-bit arithmetic (core::MaskSpec32).
  if (!core::MaskSpec32::holds(p.seqlen_q, p.seqlen_k))
    return Status::NotSupported("algorithm fa2: seqlen_q + seqlen_k must stay below 2^31 - 256");
  for (const ForwardOperand& o : forward_operands(p)) {
    if (o.rows == 0) continue;  // a tensor without rows is never addressed
    Status st = check_alignment(o.name, *o.s, o.rows, o.heads, p.batch, p.varlen);
    if (!st.ok()) return st;
  }
  if (size_t(shape.smem_bytes) > ctx.smem_optin)
    return Status::NotSupported("algorithm fa2: head_dim " + std::to_string(shape.head_dim) + " needs " +
                                std::to_string(shape.smem_bytes) + " bytes of shared memory per block, the " +
                                "device allows " + std::to_string(ctx.smem_optin));
  if (kernel != nullptr) {
    *kernel = std::string("fa2_fwd_sm80_") + dtype_tag(p.dtype) + "_hd" + std::to_string(shape.head_dim) + "_m" +
              std::to_string(shape.block_m) + "n" + std::to_string(shape.block_n);
    if (fa2_candidate_requested()) *kernel += kCandidateSuffix;
  }
  return Status::Ok();
}

Status fa2_forward(const detail::Problem& p, const Context& ctx) {
  Status s = fa2_supports(p, ctx, nullptr);
  if (!s.ok()) return s;
  if (p.batch == 0 || p.seqlen_q == 0) return Status::Ok();  // nothing to write
  if (p.dtype == DType::kFloat16) return launch_for_head_dim<__half>(p, ctx);
  return launch_for_head_dim<__nv_bfloat16>(p, ctx);
}

}  // namespace flashattn::cuda
