#include "cuda/common/unowned_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/problem_params.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;

// Rows [row_begin, row_begin + rows) of t in each of `batches` batches, every head and its first head_dim
// columns: 0 (the zero bits of fp16 and of bf16); where lse.ptr is set, the lse of each (batch, head, row):
// -inf. A grid-stride loop over the elements.
__global__ void __launch_bounds__(kThreads) zero_rows_kernel(const TensorParams t, const TensorParams lse,
                                                             const int64_t row_begin, const int64_t rows,
                                                             const int64_t batches, const int heads,
                                                             const int head_dim) {
  const int64_t per_batch = rows * heads * head_dim;
  const int64_t n = batches * per_batch;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / per_batch, j = i % per_batch;
    const int x = int(j % head_dim);
    const int h = int((j / head_dim) % heads);
    const int64_t r = row_begin + j / (int64_t(head_dim) * heads);
    static_cast<uint16_t*>(t.ptr)[b * t.batch_stride + r * t.row_stride + h * t.head_stride + x] = 0;
    if (x == 0 && lse.ptr != nullptr)
      static_cast<float*>(lse.ptr)[b * lse.batch_stride + h * lse.head_stride + r * lse.row_stride] = -INFINITY;
  }
}

}  // namespace

Status zero_rows(const detail::Strided& t, int64_t row_begin, int64_t row_end, int64_t heads, int64_t head_dim,
                 const Context& ctx, const detail::Strided* lse, int64_t batches) {
  if (row_end <= row_begin || batches <= 0 || heads == 0 || head_dim == 0) return Status::Ok();
  const int64_t rows = row_end - row_begin;
  const int64_t n = batches * rows * heads * head_dim;
  const int64_t blocks =
      std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(std::max(ctx.sm_count, 1)) * kBlocksPerSm);
  const TensorParams no_lse{};
  zero_rows_kernel<<<unsigned(blocks), kThreads, 0, ctx.stream>>>(
      to_params(t), lse != nullptr ? to_params(*lse) : no_lse, row_begin, rows, batches, int(heads),
      int(head_dim));
  FA_CUDA_RETURN_IF_LAUNCH_ERROR("zero_rows_kernel");
  return Status::Ok();
}

Status write_unowned_forward_rows(const detail::Problem& p, const Context& ctx) {
  if (!p.varlen) return Status::Ok();
  return zero_rows(p.out, p.cu_q.back(), p.total_q, p.heads_q, p.head_dim, ctx, p.lse.present() ? &p.lse : nullptr);
}

Status write_forward_without_keys(const detail::Problem& p, const Context& ctx) {
  const detail::Strided* lse = p.lse.present() ? &p.lse : nullptr;
  if (p.varlen) return zero_rows(p.out, 0, p.total_q, p.heads_q, p.head_dim, ctx, lse);
  return zero_rows(p.out, 0, p.seqlen_q, p.heads_q, p.head_dim, ctx, lse, p.batch);
}

Status write_unowned_backward_rows(const detail::Problem& p, const Context& ctx) {
  if (!p.varlen) return Status::Ok();
  Status s = zero_rows(p.dq, p.cu_q.back(), p.total_q, p.heads_q, p.head_dim, ctx);
  if (s.ok()) s = zero_rows(p.dk, p.cu_k.back(), p.total_k, p.heads_kv, p.head_dim, ctx);
  if (s.ok()) s = zero_rows(p.dv, p.cu_k.back(), p.total_k, p.heads_kv, p.head_dim, ctx);
  return s;
}

}  // namespace flashattn::cuda
