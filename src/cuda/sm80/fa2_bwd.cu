// The FA2 backward (sm80+) as the dispatcher sees it: what is supported (and the kernel's name), and the
// choice of the (dtype, head_dim) instantiation to run. The kernel set is the switch in by_head_dim; the
// launch sequence lives in fa2_bwd_launch.cuh and is instantiated once per head dim (fa2_bwd_hd*.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/common/candidate.h"
#include "cuda/common/problem_params.cuh"
#include "cuda/launch.h"
#include "cuda/sm80/fa2_bwd_config.cuh"
#include "cuda/sm80/fa2_common.cuh"  // fa2::kMaxTileRowStride

namespace flashattn::cuda {
namespace fa2_bwd {
// Defined in fa2_bwd_launch.cuh, instantiated in fa2_bwd_hd<D>.cu.
template <typename T, int D>
Status run(const detail::Problem& p, const Context& ctx);
}  // namespace fa2_bwd

namespace {

using detail::Problem;
using detail::Strided;

constexpr int kMinCcMajor = 8;      // cp.async, ldmatrix and bf16 mma.sync arrived with sm80
constexpr int kCopyAlignBytes = 16;  // every cp.async / vector access moves 16 bytes
constexpr int64_t kMaxGridYz = 65535;

template <typename T, int D>
struct Tag {
  using Type = T;
  static constexpr int kHeadDim = D;
};

// Calls fn(Tag<T, D>{}) for the built (dtype, head_dim); NotSupported otherwise.
template <typename T, typename Fn>
Status by_head_dim(int64_t head_dim, Fn&& fn) {
  switch (head_dim) {
    case 64: return fn(Tag<T, 64>{});
    case 96: return fn(Tag<T, 96>{});
    case 128: return fn(Tag<T, 128>{});
    case 192: return fn(Tag<T, 192>{});
    case 256: return fn(Tag<T, 256>{});
    default:
      return Status::NotSupported("algorithm fa2: backward is built for head_dim 64, 96, 128, 192 and 256; got " +
                                  std::to_string(head_dim));
  }
}
template <typename Fn>
Status by_config(const Problem& p, Fn&& fn) {
  if (p.dtype == DType::kFloat16) return by_head_dim<__half>(p.head_dim, fn);
  if (p.dtype == DType::kBFloat16) return by_head_dim<__nv_bfloat16>(p.head_dim, fn);
  return Status::NotSupported(std::string("algorithm fa2: backward supports float16 and bfloat16, got ") +
                              to_string(p.dtype));
}

template <class Cfg>
std::string kernel_name(bool deterministic) {
  using T = typename Cfg::T;
  constexpr int D = Cfg::kHeadDim;
  return std::string("fa2_bwd_sm80_") + fa2_bwd::dtype_tag<T>() + "_hd" + std::to_string(D) + "_n" +
         std::to_string(Cfg::kBlockN) + "m" + std::to_string(Cfg::kBlockM) + (deterministic ? "_det" : "") +
         (Cfg::kCandidate ? kCandidateSuffix : "");
}

// cp.async and the 16-byte vector accesses need 16-byte aligned rows: the base pointer and every stride
// of a dimension with more than one entry must be multiples of 16 bytes.
Status check_copy_alignment(const char* name, const Strided& t, int64_t batch, int64_t rows, int64_t heads,
                            int64_t elem_bytes) {
  const int64_t stride_unit = kCopyAlignBytes / elem_bytes;
  const bool ok = reinterpret_cast<uintptr_t>(t.ptr) % kCopyAlignBytes == 0 &&
                  (batch <= 1 || t.batch_stride % stride_unit == 0) && (rows <= 1 || t.row_stride % stride_unit == 0) &&
                  (heads <= 1 || t.head_stride % stride_unit == 0);
  if (!ok)
    return Status::NotSupported(std::string("algorithm fa2: backward needs ") + name +
                                " 16-byte aligned with strides that are multiples of " + std::to_string(stride_unit) +
                                " elements (cp.async copies 16 bytes)");
  if (rows > 1 && t.row_stride > fa2::kMaxTileRowStride)
    return Status::NotSupported(std::string("algorithm fa2: backward: ") + name + " row stride " +
                                std::to_string(t.row_stride) + " elements exceeds " +
                                std::to_string(fa2::kMaxTileRowStride) + " (tiles are addressed with 32-bit offsets)");
  return Status::Ok();
}

template <typename T, int D>
Status check(const Problem& p, const Context& ctx, std::string* kernel) {
  using QCfg = fa2_bwd::DqConfig<T, D>;
  const int64_t batch = p.varlen ? 1 : p.batch;  // varlen tensors have no batch dimension
  const int64_t eb = sizeof(T);
  struct Named {
    const char* name;
    const Strided& t;
    int64_t rows, heads;
  } tensors[] = {{"q", p.q, p.total_q, p.heads_q},       {"k", p.k, p.total_k, p.heads_kv},
                 {"v", p.v, p.total_k, p.heads_kv},      {"out", p.out, p.total_q, p.heads_q},
                 {"dout", p.dout, p.total_q, p.heads_q}, {"dq", p.dq, p.total_q, p.heads_q},
                 {"dk", p.dk, p.total_k, p.heads_kv},    {"dv", p.dv, p.total_k, p.heads_kv}};
  for (const Named& n : tensors) {
    if (n.rows == 0) continue;  // a tensor without rows is never addressed
    Status s = check_copy_alignment(n.name, n.t, batch, n.rows, n.heads, eb);
    if (!s.ok()) return s;
  }
  if (p.batch > kMaxGridYz || p.heads_q > kMaxGridYz)
    return Status::NotSupported("algorithm fa2: backward launches one grid row per (head, batch) and supports at most " +
                                std::to_string(kMaxGridYz) + " of each");
  size_t smem = 0;
  std::string name;
  fa2_bwd::with_dkdv_config<T, D>(ctx.smem_optin, [&](auto cfg) {
    using KCfg = decltype(cfg);
    smem = std::max<size_t>(KCfg::kSmemBytes, p.deterministic ? QCfg::kSmemBytes : 0);
    name = kernel_name<KCfg>(p.deterministic);
  });
  if (smem > ctx.smem_optin)
    return Status::NotSupported("algorithm fa2: kernel " + name + " needs " + std::to_string(smem) +
                                " bytes of shared memory per block; the device allows " +
                                std::to_string(ctx.smem_optin));
  if (kernel) *kernel = name;
  return Status::Ok();
}

Status check_device(const Context& ctx) {
  if (ctx.cc_major < kMinCcMajor)
    return Status::NotSupported("algorithm fa2: backward needs compute capability 8.0 or newer (cp.async, ldmatrix, "
                                "bf16 mma.sync); the device has " +
                                std::to_string(ctx.cc_major) + "." + std::to_string(ctx.cc_minor));
  return Status::Ok();
}

}  // namespace

Status fa2_backward_supports(const Problem& p, const Context& ctx, std::string* kernel) {
  Status s = check_device(ctx);
  if (!s.ok()) return s;
  return by_config(p, [&](auto tag) {
    using Tg = decltype(tag);
    return check<typename Tg::Type, Tg::kHeadDim>(p, ctx, kernel);
  });
}

Status fa2_backward(const Problem& p, const Context& ctx) {
  Status s = fa2_backward_supports(p, ctx, nullptr);
  if (!s.ok()) return s;
  return by_config(p, [&](auto tag) {
    using Tg = decltype(tag);
    return fa2_bwd::run<typename Tg::Type, Tg::kHeadDim>(p, ctx);
  });
}

}  // namespace flashattn::cuda
