#include "cuda/common/unowned_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/problem_params.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;

// Rows [row_begin, row_begin + rows) of out, every head and column: 0 (the zero bits of fp16 and of bf16);
// the lse of each (head, row): -inf. A grid-stride loop over the elements.
__global__ void __launch_bounds__(kThreads) unowned_rows_kernel(const TensorParams out, const TensorParams lse,
                                                                const int64_t row_begin, const int64_t rows,
                                                                const int heads, const int head_dim) {
  const int64_t n = rows * heads * head_dim;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int x = int(i % head_dim);
    const int h = int((i / head_dim) % heads);
    const int64_t r = row_begin + i / (int64_t(head_dim) * heads);
    static_cast<uint16_t*>(out.ptr)[r * out.row_stride + h * out.head_stride + x] = 0;
    if (x == 0 && lse.ptr != nullptr)
      static_cast<float*>(lse.ptr)[h * lse.head_stride + r * lse.row_stride] = -INFINITY;
  }
}

}  // namespace

Status write_unowned_forward_rows(const detail::Problem& p, const Context& ctx) {
  if (!p.varlen || p.cu_q.back() >= p.total_q || p.heads_q == 0 || p.head_dim == 0) return Status::Ok();
  if (dtype_size(p.dtype) != 2)
    return Status::Runtime(std::string("write_unowned_forward_rows: 16-bit outputs only, got ") + to_string(p.dtype));
  const int64_t row_begin = p.cu_q.back(), rows = p.total_q - row_begin;
  const int64_t n = rows * p.heads_q * p.head_dim;
  const int64_t blocks =
      std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(std::max(ctx.sm_count, 1)) * kBlocksPerSm);
  unowned_rows_kernel<<<unsigned(blocks), kThreads, 0, ctx.stream>>>(to_params(p.out), to_params(p.lse), row_begin,
                                                                     rows, int(p.heads_q), int(p.head_dim));
  FA_CUDA_RETURN_IF_LAUNCH_ERROR("unowned_rows_kernel");
  return Status::Ok();
}

}  // namespace flashattn::cuda
