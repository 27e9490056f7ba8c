// The small kernels of the `standard` algorithm that run between its cuBLAS products: the row softmax of
// the materialized scores S, the backward's probabilities and score gradients, the row dot products
// D = rowsum(dO * O), and fp32 -> 16-bit stores into strided tensors.
//
// Every row kernel gives one warp one row of one (batch, head) matrix. The matrices of a segment are
// stored back to back, [batches, heads_q, len_q, len_k] (row-major, fp32 or 16-bit), so row r of the
// segment starts at r * len_k.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/mask.h"
#include "core/numeric.h"
#include "core/softmax_online.h"
#include "cuda/common/problem_params.cuh"

namespace flashattn::cuda::standard_detail {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kRowThreads = kWarpSize * kRowsPerBlock;
constexpr int kStoreThreads = 256;

// One run of consecutive batches that share (len_q, len_k): the whole batch for padded inputs, one
// sequence for varlen. Host offsets of the packed rows travel along so kernels need no cu_seqlens.
struct SegmentShape {
  int batch0 = 0;
  int batches = 0;
  int heads_q = 0;
  int len_q = 0, len_k = 0;
  int64_t q_row0 = 0;  // packed row of the segment's first query (varlen), else 0
  core::MaskSpec mask;
  float scale = 1.0f;
  float softcap = 0.0f;

  __host__ __device__ __forceinline__ int64_t rows() const { return int64_t(batches) * heads_q * len_q; }
  // The scaled, optionally softcapped score in natural-log units.
  __device__ __forceinline__ float transform(float raw) const {
    const float s = raw * scale;
    return softcap > 0.0f ? core::apply_softcap(s, softcap) : s;
  }
  // Element offset of (row, head) of batch `bi` (segment-local) in a strided q-like tensor.
  __device__ __forceinline__ int64_t q_like_offset(const TensorParams& t, int bi, int head, int row) const {
    return int64_t(batch0 + bi) * t.batch_stride + (q_row0 + row) * t.row_stride + int64_t(head) * t.head_stride;
  }
  __device__ __forceinline__ int64_t lse_offset(const TensorParams& t, int bi, int head, int row) const {
    return int64_t(batch0 + bi) * t.batch_stride + int64_t(head) * t.head_stride + (q_row0 + row) * t.row_stride;
  }
};

// Decomposes a segment row index into (batch within the segment, head, query row).
struct RowId {
  int bi, head, row;
};
__device__ __forceinline__ RowId row_id(const SegmentShape& sh, int64_t r) {
  const int64_t matrix = r / sh.len_q;
  return RowId{int(matrix / sh.heads_q), int(matrix % sh.heads_q), int(r % sh.len_q)};
}

__device__ __forceinline__ int64_t warp_row() {
  return int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
}
__device__ __forceinline__ int lane_id() { return int(threadIdx.x % kWarpSize); }

// Forward softmax of one row: P = exp(s - LSE) on visible keys, 0 elsewhere; LSE written when requested.
// A row that sees no key gets P = 0 and LSE = -inf.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) softmax_forward_kernel(const float* __restrict__ scores,
                                                                      T* __restrict__ probs, SegmentShape sh,
                                                                      TensorParams lse) {
  const int64_t r = warp_row();
  if (r >= sh.rows()) return;
  const int lane = lane_id();
  const RowId id = row_id(sh, r);
  const int kb = int(sh.mask.key_begin(id.row));
  const int ke = int(sh.mask.key_end(id.row));
  const float* s_row = scores + r * sh.len_k;
  T* p_row = probs + r * sh.len_k;

  // Per-lane online max and sum in log2 units, then a butterfly merge across the warp.
  float m = core::kNegInf, l = 0.0f;
  for (int j = kb + lane; j < ke; j += kWarpSize) {
    const float x = sh.transform(s_row[j]) * core::kLog2e;
    if (x > m) {
      l = l * exp2f(m - x) + 1.0f;
      m = x;
    } else {
      l += exp2f(x - m);
    }
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float m_other = __shfl_xor_sync(kFullWarp, m, offset);
    const float l_other = __shfl_xor_sync(kFullWarp, l, offset);
    const float m_new = fmaxf(m, m_other);
    // -inf - -inf is NaN: a side that has seen no key contributes nothing.
    const float a = m == core::kNegInf ? 0.0f : l * exp2f(m - m_new);
    const float b = m_other == core::kNegInf ? 0.0f : l_other * exp2f(m_other - m_new);
    m = m_new;
    l = a + b;
  }
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  for (int j = lane; j < sh.len_k; j += kWarpSize) {
    const float pj = (j >= kb && j < ke) ? exp2f(sh.transform(s_row[j]) * core::kLog2e - m) * inv_l : 0.0f;
    p_row[j] = T(pj);
  }
  if (lse.ptr != nullptr && lane == 0) {
    static_cast<float*>(lse.ptr)[sh.lse_offset(lse, id.bi, id.head, id.row)] =
        l > 0.0f ? (m + log2f(l)) * core::kLn2 : core::kNegInf;
  }
}

// exp(s - LSE) of a visible key, recomputed from the saved LSE; 0 when masked or the row saw no key.
__device__ __forceinline__ float prob_from_lse(float capped, float lse_log2, bool visible) {
  return (visible && lse_log2 != core::kNegInf) ? exp2f(capped * core::kLog2e - lse_log2) : 0.0f;
}

__device__ __forceinline__ float row_lse_log2(const SegmentShape& sh, const TensorParams& lse, const RowId& id) {
  return static_cast<const float*>(lse.ptr)[sh.lse_offset(lse, id.bi, id.head, id.row)] * core::kLog2e;
}

// Backward, step 1: P in the input dtype (the operand of dV = P^T dO).
template <typename T>
__global__ void __launch_bounds__(kRowThreads) probs_from_lse_kernel(const float* __restrict__ scores,
                                                                     T* __restrict__ probs, SegmentShape sh,
                                                                     TensorParams lse) {
  const int64_t r = warp_row();
  if (r >= sh.rows()) return;
  const RowId id = row_id(sh, r);
  const int kb = int(sh.mask.key_begin(id.row));
  const int ke = int(sh.mask.key_end(id.row));
  const float lse_log2 = row_lse_log2(sh, lse, id);
  const float* s_row = scores + r * sh.len_k;
  T* p_row = probs + r * sh.len_k;
  for (int j = lane_id(); j < sh.len_k; j += kWarpSize)
    p_row[j] = T(prob_from_lse(sh.transform(s_row[j]), lse_log2, j >= kb && j < ke));
}

// Backward, step 2: dS = P * (dP - D), times the softcap derivative, in the input dtype. P is recomputed
// in fp32 from S rather than read back rounded.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) dscores_kernel(const float* __restrict__ scores,
                                                              const float* __restrict__ dprobs,
                                                              const float* __restrict__ row_dot,
                                                              T* __restrict__ dscores, SegmentShape sh,
                                                              TensorParams lse) {
  const int64_t r = warp_row();
  if (r >= sh.rows()) return;
  const RowId id = row_id(sh, r);
  const int kb = int(sh.mask.key_begin(id.row));
  const int ke = int(sh.mask.key_end(id.row));
  const float lse_log2 = row_lse_log2(sh, lse, id);
  const float d_row = row_dot[r];
  const float* s_row = scores + r * sh.len_k;
  const float* dp_row = dprobs + r * sh.len_k;
  T* ds_row = dscores + r * sh.len_k;
  for (int j = lane_id(); j < sh.len_k; j += kWarpSize) {
    const float capped = sh.transform(s_row[j]);
    const float pj = prob_from_lse(capped, lse_log2, j >= kb && j < ke);
    float ds = pj * (dp_row[j] - d_row);
    if (sh.softcap > 0.0f) ds *= core::softcap_grad(capped, sh.softcap);
    ds_row[j] = T(ds);
  }
}

// D = rowsum(dO * O) per (batch, head, query row), fp32, in segment row order.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) row_dot_kernel(TensorParams out, TensorParams dout, int head_dim,
                                                              float* __restrict__ row_dot, SegmentShape sh) {
  const int64_t r = warp_row();
  if (r >= sh.rows()) return;
  const RowId id = row_id(sh, r);
  const T* o = static_cast<const T*>(out.ptr) + sh.q_like_offset(out, id.bi, id.head, id.row);
  const T* d_o = static_cast<const T*>(dout.ptr) + sh.q_like_offset(dout, id.bi, id.head, id.row);
  float acc = 0.0f;
  for (int c = lane_id(); c < head_dim; c += kWarpSize) acc += float(o[c]) * float(d_o[c]);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) acc += __shfl_xor_sync(kFullWarp, acc, offset);
  if (lane_id() == 0) row_dot[r] = acc;
}

// Rows [row0, row0 + len) of heads [0, heads) of batches [batch0, batch0 + batches) of a strided tensor:
// dst = alpha * src, where src is fp32 [batches, heads, len, head_dim] contiguous; src == nullptr writes zeros.
struct StoreRows {
  TensorParams dst;
  int batch0, batches, heads, len, head_dim;
  int64_t row0;
  __host__ __device__ int64_t elements() const { return int64_t(batches) * heads * len * head_dim; }
};

template <typename T>
__global__ void __launch_bounds__(kStoreThreads) store_rows_kernel(const float* __restrict__ src, float alpha,
                                                                   StoreRows st) {
  const int64_t n = st.elements();
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(e % st.head_dim);
    const int64_t rest = e / st.head_dim;
    const int row = int(rest % st.len);
    const int64_t matrix = rest / st.len;
    const int head = int(matrix % st.heads);
    const int bi = int(matrix / st.heads);
    const int64_t at = int64_t(st.batch0 + bi) * st.dst.batch_stride + (st.row0 + row) * st.dst.row_stride +
                       int64_t(head) * st.dst.head_stride + c;
    static_cast<T*>(st.dst.ptr)[at] = T(src ? alpha * src[e] : 0.0f);
  }
}

}  // namespace flashattn::cuda::standard_detail
