// Tile plumbing shared by the fa1 forward and backward kernels: the tile configuration, global -> shared
// tile loads with zero fill, warp-level mma.sync fragment loads from shared memory, and the score
// transform (scale, softcap, mask).
//
// Fragment loads follow the mma.m16n8k16 layouts documented in cuda/common/ptx_sm80.cuh. Each ldmatrix
// x4 loads four 8x8 matrices whose row addresses come from lanes 0-7, 8-15, 16-23 and 24-31 in turn; the
// per-lane (row, col) formulas below pick those four matrices in the order the mma operand wants them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/mask.h"
#include "core/numeric.h"
#include "core/softmax_online.h"
#include "cuda/common/problem_params.cuh"
#include "cuda/common/ptx_sm80.cuh"

namespace flashattn::cuda::fa1 {

constexpr int kWarpSize = 32;
constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;
constexpr int kVecElems = 8;  // 16-bit elements per 16-byte vector load
constexpr int kMaxHeadDim = 128;

template <int kHeadDim_>
struct Config {
  static constexpr int kHeadDim = kHeadDim_;  // head_dim rounded up; columns >= head_dim are zero-filled
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kBlockM = kMmaM * kWarps;  // query rows of an inner tile: 16 per warp
  static constexpr int kBlockN = 64;              // keys of an outer tile
  // 8 elements (16 B) of padding per shared row: consecutive rows start 16 B apart modulo 128 B, so the
  // eight row addresses of each ldmatrix hit distinct banks.
  static constexpr int kPad = 8;
  static constexpr int kLd = kHeadDim + kPad;   // shared row stride of Q, K, V, dO tiles (elements)
  static constexpr int kLdP = kBlockN + kPad;   // shared row stride of P and dS tiles (backward)
  static constexpr int kHeadTiles = kHeadDim / kMmaN;
  static constexpr int kKeyTiles = kBlockN / kMmaN;
  static_assert(kHeadDim % (2 * kMmaN) == 0 && kHeadDim % kMmaK == 0,
                "head dim tiles are loaded in pairs of n8 tiles and consumed in k16 steps");
  static_assert(kHeadDim <= kMaxHeadDim, "fa1 is built for head dims up to 128");
  static_assert(kBlockN % (2 * kMmaN) == 0, "key tiles are loaded in pairs of n8 tiles");
  static_assert(kBlockM == kBlockN, "the backward gives each warp 16 keys of the KV tile as it gives 16 query rows");
};

// Copies rows [0, rows) x columns [0, kCols) of a strided 16-bit matrix into shared memory (row stride kLd),
// writing zeros for rows >= valid_rows and columns >= cols. With `vec` the global rows are 16-byte aligned
// and cols % 8 == 0, so whole 16-byte vectors are loaded.
template <typename T, int kRows, int kCols, int kLd, int kThreads>
__device__ __forceinline__ void load_tile(T* smem, const T* gmem, int64_t row_stride, int valid_rows, int cols,
                                          bool vec) {
  static_assert(kCols % kVecElems == 0 && kLd % kVecElems == 0, "tiles are moved in 16-byte vectors");
  constexpr int kChunksPerRow = kCols / kVecElems;
  for (int chunk = threadIdx.x; chunk < kRows * kChunksPerRow; chunk += kThreads) {
    const int r = chunk / kChunksPerRow;
    const int c = (chunk % kChunksPerRow) * kVecElems;
    T* dst = smem + r * kLd + c;
    const T* src = gmem + r * row_stride + c;
    if (r >= valid_rows) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    } else if (vec && c < cols) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      #pragma unroll
      for (int e = 0; e < kVecElems; ++e) dst[e] = c + e < cols ? src[e] : T(0.0f);
    }
  }
}

__device__ __forceinline__ int lane_id() { return int(threadIdx.x % kWarpSize); }

// A operand (16 x 16) of a row-major [m][k] shared tile, at (m0, k0).
template <int kLd, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* s, int m0, int k0) {
  const int lane = lane_id();
  ldmatrix_x4(a, s + (m0 + lane % 16) * kLd + k0 + (lane / 16) * 8);
}

// A operand (16 x 16) that is the transpose of a shared tile stored [k][m], at (m0, k0).
template <int kLd, typename T>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const T* s, int m0, int k0) {
  const int lane = lane_id();
  ldmatrix_x4_trans(a, s + (k0 + lane % 8 + (lane / 16) * 8) * kLd + m0 + ((lane / 8) % 2) * 8);
}

// B operands of two adjacent n8 tiles (n0 and n0 + 8, one k16 step) from a shared tile stored [n][k]
// (B = tile^T: K for S = Q K^T). b[0..1] belong to tile n0, b[2..3] to tile n0 + 8.
template <int kLd, typename T>
__device__ __forceinline__ void load_b_pair(uint32_t (&b)[4], const T* s, int n0, int k0) {
  const int lane = lane_id();
  ldmatrix_x4(b, s + (n0 + lane % 8 + (lane / 16) * 8) * kLd + k0 + ((lane / 8) % 2) * 8);
}

// B operands of two adjacent n8 tiles from a shared tile stored [k][n] (B = tile: V for O = P V).
template <int kLd, typename T>
__device__ __forceinline__ void load_b_pair_trans(uint32_t (&b)[4], const T* s, int n0, int k0) {
  const int lane = lane_id();
  ldmatrix_x4_trans(b, s + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * kLd + n0 + (lane / 16) * 8);
}

template <typename T>
__device__ __forceinline__ void mma_pair(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]};
  const uint32_t b1[2] = {b[2], b[3]};
  mma_16816<T>(d0, a, b0);
  mma_16816<T>(d1, a, b1);
}

// The accumulators of two n8 tiles (keys 16k .. 16k + 15 of a 16-row score tile) repacked as the A
// operand of the next product: the C layout of adjacent n8 tiles is the A layout of one k16 step.
template <typename T>
__device__ __forceinline__ void pack_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

// Position of accumulator element e (0..3) of an m16n8 tile: row offset (g or g + 8) and column (2t, 2t + 1).
__device__ __forceinline__ int acc_row(int e) { return lane_id() / 4 + (e >= 2 ? 8 : 0); }
__device__ __forceinline__ int acc_col(int e) { return (lane_id() % 4) * 2 + (e & 1); }

// The scaled, optionally softcapped score (natural-log units).
__device__ __forceinline__ float transform_score(const AttnParams& p, float raw) {
  const float s = raw * p.scale;
  return p.softcap > 0.0f ? core::apply_softcap(s, p.softcap) : s;
}

// Row index into the fp32 workspaces ([heads][rows][...]): packed row for varlen, b * seqlen_q + row else.
__device__ __forceinline__ int64_t workspace_row(const AttnParams& p, int b, int row) {
  return (p.cu_q ? int64_t(p.cu_q[b]) : int64_t(b) * p.seqlen_q) + row;
}

// The (head, batch, row) of item = head * rows + workspace row, for the per-row passes over a workspace.
// Varlen rows are packed rows of batch 0 (batch stride 0); padded rows are b * seqlen_q + row.
__device__ __forceinline__ void workspace_item(const AttnParams& p, int64_t rows, int64_t item, int* head,
                                               int64_t* b, int64_t* i) {
  *head = int(item / rows);
  const int64_t row = item % rows;
  *b = p.cu_q ? 0 : row / p.seqlen_q;
  *i = p.cu_q ? row : row % p.seqlen_q;
}

// Element offsets of (b, row 0, head) in q-like and k-like strided tensors.
__device__ __forceinline__ int64_t q_base(const TensorParams& t, const AttnParams& p, int b, int head) {
  return int64_t(b) * t.batch_stride + int64_t(p.q_offset(b)) * t.row_stride + int64_t(head) * t.head_stride;
}
__device__ __forceinline__ int64_t k_base(const TensorParams& t, const AttnParams& p, int b, int head) {
  return int64_t(b) * t.batch_stride + int64_t(p.k_offset(b)) * t.row_stride + int64_t(head) * t.head_stride;
}

// Whether key tile `key_tile` (of kBlockN keys) holds a key that some row of the query tile sees.
__device__ __forceinline__ bool tile_pair_active(const core::MaskSpec& mask, int m0, int m_end, int key_tile,
                                                 int block_n) {
  const core::BlockRange r = core::kv_block_range(mask, m0, m_end, block_n);
  return key_tile >= r.first && key_tile < r.last;
}

}  // namespace flashattn::cuda::fa1
