// The launch sequence of one FA2 backward call for one (dtype, head_dim), instantiated per head dim in
// fa2_bwd_hd*.cu so the kernels build in parallel:
//   pre-pass (D, LSE) -> dK/dV kernel (+ atomic dQ) -> post-pass (dq in the input dtype)
// or, in deterministic mode,
//   pre-pass -> dK/dV kernel (no dQ) -> Q-parallel dQ kernel (fixed KV order, see fa2_bwd_dq.cuh).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"
#include "cuda/common/stream_buffer.h"
#include "cuda/launch.h"
#include "cuda/sm80/fa2_bwd_dkdv.cuh"
#include "cuda/sm80/fa2_bwd_dq.cuh"
#include "cuda/sm80/fa2_bwd_prepost.cuh"

namespace flashattn::cuda::fa2_bwd {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Workspace (stream-ordered, freed on every path), then the kernels in order on ctx.stream.
template <typename T, int D>
Status run(const detail::Problem& p, const Context& ctx) {
  using QCfg = DqConfig<T, D>;
  const AttnParams a = make_params(p);
  cudaStream_t stream = ctx.stream;
  const bool det = p.deterministic;

  Workspace ws;
  ws.rows_pad = int(ceil_div(p.seqlen_q, kRowAlign) * kRowAlign);
  const int64_t row_vec_floats = p.batch * p.heads_q * ws.rows_pad;
  const int64_t accum_floats = det ? 0 : accum_rows(p.total_q, p.batch) * p.heads_q * D;
  StreamBuffer buffer(stream);
  // Layout: [dQ accumulator | LSE log2 | D]; each part is a multiple of 16 bytes long.
  Status s = buffer.allocate(size_t(accum_floats + 2 * row_vec_floats) * sizeof(float));
  if (!s.ok()) return s;
  float* base = buffer.floats();
  ws.dq_accum = det ? nullptr : base;
  ws.lse_log2 = base + accum_floats;
  ws.delta = ws.lse_log2 + row_vec_floats;
  if (accum_floats > 0)
    FA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ws.dq_accum, 0, size_t(accum_floats) * sizeof(float), stream));

  if (row_vec_floats > 0) {
    const dim3 grid(unsigned(ws.rows_pad / kPrepassRows), unsigned(p.heads_q), unsigned(p.batch));
    prepass_kernel<T, D><<<grid, kPrepassThreads, 0, stream>>>(a, ws);
    FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa2_bwd prepass_kernel");
  }

  if (p.seqlen_k > 0 && p.batch > 0) {
    s = with_dkdv_config<T, D>(ctx.smem_optin, [&](auto cfg) -> Status {
      using KCfg = decltype(cfg);
      auto* kernel = p.softcap > 0.0f ? dkdv_kernel<KCfg, true> : dkdv_kernel<KCfg, false>;
      FA_CUDA_RETURN_IF_ERROR(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, KCfg::kSmemBytes));
      const dim3 grid(unsigned(ceil_div(p.seqlen_k, KCfg::kBlockN)), unsigned(p.heads_kv), unsigned(p.batch));
      kernel<<<grid, KCfg::kThreads, KCfg::kSmemBytes, stream>>>(a, ws, /*accumulate_dq=*/!det);
      FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa2_bwd dkdv_kernel");
      return Status::Ok();
    });
    if (!s.ok()) return s;
  }

  if (det) {
    if (p.seqlen_q > 0 && p.batch > 0) {
      auto* kernel = p.softcap > 0.0f ? dq_kernel<QCfg, true> : dq_kernel<QCfg, false>;
      FA_CUDA_RETURN_IF_ERROR(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, QCfg::kSmemBytes));
      const dim3 grid(unsigned(ceil_div(p.seqlen_q, QCfg::kBlockM)), unsigned(p.heads_q), unsigned(p.batch));
      kernel<<<grid, QCfg::kThreads, QCfg::kSmemBytes, stream>>>(a, ws);
      FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa2_bwd dq_kernel");
    }
  } else if (p.seqlen_q > 0 && p.batch > 0) {
    const dim3 grid(unsigned(ceil_div(p.seqlen_q, kAccumTileRows)), unsigned(p.batch));
    postpass_kernel<T, D><<<grid, kElementwiseThreads, 0, stream>>>(a, ws);
    FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa2_bwd postpass_kernel");
  }

  return buffer.release();
}

}  // namespace flashattn::cuda::fa2_bwd

// Explicit instantiation of the launch sequence for both 16-bit dtypes of one head dim.
#define FA2_BWD_INSTANTIATE(HEAD_DIM)                                                                   \
  template ::flashattn::Status flashattn::cuda::fa2_bwd::run<__half, HEAD_DIM>(                         \
      const ::flashattn::detail::Problem&, const ::flashattn::cuda::Context&);                          \
  template ::flashattn::Status flashattn::cuda::fa2_bwd::run<__nv_bfloat16, HEAD_DIM>(                  \
      const ::flashattn::detail::Problem&, const ::flashattn::cuda::Context&);
