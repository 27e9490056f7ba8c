// Building blocks shared by the FA2 backward kernels: cp.async loads of the per-row vectors (the 16-bit
// tiles load with fa2::TileLoader, fa2_common.cuh), warp-level mma.sync fragment loads from padded
// shared-memory tiles, the score -> (P, dS) element math, and the query-row range of a KV tile under the
// mask.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/mask.h"
#include "core/numeric.h"
#include "core/softmax_online.h"
#include "cuda/common/problem_params.cuh"
#include "cuda/common/ptx_sm80.cuh"
#include "cuda/sm80/fa2_bwd_config.cuh"
#include "cuda/sm80/fa2_common.cuh"

namespace flashattn::cuda::fa2_bwd {

// ---- Global addressing --------------------------------------------------------------------------------

// Element (batch b, row, head, column 0) of a tensor with the strides of `t`. `row` counts from the start
// of the tensor's rows: a varlen caller adds the sequence's cu_seqlens offset.
template <typename T>
__device__ __forceinline__ T* row_ptr(const TensorParams& t, int b, int64_t row, int head) {
  return static_cast<T*>(t.ptr) + b * t.batch_stride + row * t.row_stride + head * t.head_stride;
}

// ---- Global -> shared ----------------------------------------------------------------------------------

// kRows fp32 values (contiguous, 16-byte aligned, always in bounds) into shared memory: the threads with
// `chunk` in [0, kRows / 4) each copy 16 bytes; the others do nothing.
constexpr int kFloatsPerChunk = 4;
template <int kRows>
__device__ __forceinline__ void load_row_vec_async(float* smem, const float* gmem, int chunk) {
  static_assert(kRows % kFloatsPerChunk == 0, "whole 16-byte chunks");
  if (chunk >= 0 && chunk < kRows / kFloatsPerChunk)
    cp_async_16(smem + chunk * kFloatsPerChunk, gmem + chunk * kFloatsPerChunk, true);
}

// ---- Shared -> mma.sync fragments (see the layout table in ptx_sm80.cuh) --------------------------------
// `lane` = threadIdx.x % 32. Each ldmatrix.x4 lane supplies the row address of matrix lane / 8.

// A (16 x 16) from a row-major [row][k] tile at (row0, k0).
template <typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int stride, int row0, int k0, int lane) {
  // Matrices 0..3 = (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
  ldmatrix_x4(a, tile + (row0 + (lane % 16)) * stride + k0 + (lane / 16) * 8);
}

// A (16 x 16) whose transpose is stored: A(row, k) = tile[k][row], tile block at (k0, row0).
template <typename T>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const T* tile, int stride, int k0, int row0,
                                             int lane) {
  const int j = lane / 8, i = lane % 8;
  // Stored blocks (k 0-7, rows 0-7), (k 0-7, rows 8-15), (k 8-15, rows 0-7), (k 8-15, rows 8-15), each
  // transposed on load, give a0..a3.
  ldmatrix_x4_trans(a, tile + (k0 + (j / 2) * 8 + i) * stride + row0 + (j % 2) * 8);
}

// B for two adjacent 8-column tiles (n0..n0+15), k0..k0+15, from a tile stored [n][k] (B = tile^T):
// b[t][0], b[t][1] are the two registers of column tile t.
template <typename T>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[2][2], const T* tile, int stride, int n0, int k0, int lane) {
  const int j = lane / 8, i = lane % 8;
  uint32_t r[4];
  ldmatrix_x4(r, tile + (n0 + (j / 2) * 8 + i) * stride + k0 + (j % 2) * 8);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// B for two adjacent 8-column tiles from a tile stored [k][n] (row-major B): needs the transposing load.
template <typename T>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[2][2], const T* tile, int stride, int k0, int n0, int lane) {
  const int j = lane / 8, i = lane % 8;
  uint32_t r[4];
  ldmatrix_x4_trans(r, tile + (k0 + (j % 2) * 8 + i) * stride + n0 + (j / 2) * 8);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// ---- Warp-level products -------------------------------------------------------------------------------

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.0f;
}

// acc[MT][NT] += A (16*MT x 16*kSteps) * B (16*kSteps x 8*NT) on one warp. load_a(a, mt, kk) fetches the
// A fragment of row tile mt at k-step kk; load_b(b, np, kk) the B fragments of column tiles 2np, 2np+1.
// Each A fragment is reused across all NT column tiles and each B fragment across all MT row tiles,
// which is what makes square-ish warp tiles cheaper in shared-memory reads than thin ones.
// Every k-step is unrolled: two at a time once measured 3% (d 128) and 6% (d 64) faster, while the next
// tile's copies sat between the loop-top barrier and the first mma; with them behind the S product
// (DkdvConfig::kLoadsAfterS) the full unroll is 941 instead of 1155 instructions per warp and query tile at
// d 128 (no accumulator zeroing, immediate fragment offsets) and measured 7.8% faster
// (bench/results/h200-20261203-fa2-bwd-sass-vs-pytorch/).
// kPrefetch: software-pipelined instead: the fragments of k-step kk + 1 are fetched (into a second set of
// registers) before the products of step kk are issued, so ldmatrix latency hides under the mma.sync of the
// step before; its two-step loop unrolled too measured 1.1-1.3% faster at d 64 on the H200 than rolled.
template <typename T, int MT, int NT, int kSteps, bool kPrefetch = false, class LoadA, class LoadB>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], LoadA&& load_a, LoadB&& load_b) {
  static_assert(NT % 2 == 0, "B fragments are loaded for pairs of 8-column tiles");
  if constexpr (kPrefetch) {
    static_assert(kSteps % 2 == 0, "the pipelined loop handles two k-steps per iteration");
    uint32_t a0[MT][4], a1[MT][4];
    uint32_t b0[NT / 2][2][2], b1[NT / 2][2][2];
    auto fetch = [&](uint32_t(&a)[MT][4], uint32_t(&b)[NT / 2][2][2], int kk) {
#pragma unroll
      for (int m = 0; m < MT; ++m) load_a(a[m], m, kk);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) load_b(b[np], np, kk);
    };
    auto issue = [&](const uint32_t(&a)[MT][4], const uint32_t(&b)[NT / 2][2][2]) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np)
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          mma_16816<T>(acc[m][2 * np], a[m], b[np][0]);
          mma_16816<T>(acc[m][2 * np + 1], a[m], b[np][1]);
        }
    };
    fetch(a0, b0, 0);
#pragma unroll
    for (int kk = 0; kk < kSteps; kk += 2) {
      fetch(a1, b1, kk + 1);
      issue(a0, b0);
      if (kk + 2 < kSteps) fetch(a0, b0, kk + 2);
      issue(a1, b1);
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) load_a(a[m], m, kk);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t b[2][2];
        load_b(b, np, kk);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          mma_16816<T>(acc[m][2 * np], a[m], b[0]);
          mma_16816<T>(acc[m][2 * np + 1], a[m], b[1]);
        }
      }
    }
  }
}

// Calls f(std::true_type{}) where `checked`, else f(std::false_type{}): two instantiations of a tile's
// element code, so that the common tile (inside the mask, inside the sequence) issues none of the
// per-element tests. With one path and a run-time flag the tests were predicated off but still issued.
template <class F>
__device__ __forceinline__ void with_checks(bool checked, F&& f) {
  if (!checked)  // the common case first: it is the fall-through path
    f(std::false_type{});
  else
    f(std::true_type{});
}

// ---- Element math --------------------------------------------------------------------------------------

// Per-call constants of the score -> gradient map. kSoftcap is a template parameter, not a run-time test:
// a branch on softcap inside the unrolled element loops compiled to one branch (and one reconvergence
// point) per element, which serialized the exp2 latencies of the whole tile; and the tanh path with its
// division is most of the loop's code, which the common case should not have to fetch.
template <bool kSoftcap>
struct ScoreMath {
  float scale_log2;  // softmax scale * log2(e)
  float scale;       // softmax scale
  float softcap;     // > 0 when kSoftcap
  float inv_softcap;

  __device__ __forceinline__ static ScoreMath make(const AttnParams& a) {
    ScoreMath m;
    m.scale_log2 = a.scale_log2;
    m.scale = a.scale;
    m.softcap = a.softcap;
    m.inv_softcap = kSoftcap ? 1.0f / a.softcap : 0.0f;
    return m;
  }

  // P = exp(logit - LSE) recomputed from the raw score s = q.k, and the factor d(logit)/d(s * scale)
  // folded into it: returns P, and P * softcap'(.) in *pg (P itself without softcap). Then
  // dS = pg * (dP - D) is dL/d(s * scale); the factor `scale` is applied once at the end by the callers.
  // lse_log2 is +inf on rows that see no key and on padding rows, which gives P = 0 there (not NaN).
  // A masked element gets P = 0 by selection, never by arithmetic on -inf.
  __device__ __forceinline__ float p_of(float s, float lse_log2, bool visible, float* pg) const {
    if constexpr (kSoftcap) {
      // tanh(x) = 1 - 2 / (2^(2 x log2 e) + 1): two special-function instructions instead of tanhf's
      // polynomial, fewer registers (with tanhf the d = 256 dQ kernel spilled on sm_80 too, not only on
      // sm_90a). Its error is absolute (~1e-7; relative near 0), which is what P = exp(softcap * t - LSE)
      // and 1 - t^2 need; +-inf scores give t = +-1.
      const float x = s * scale * inv_softcap;
      const float t = 1.0f - __fdividef(2.0f, fast_exp2(x * (2.0f * core::kLog2e)) + 1.0f);  // capped / softcap
      float p = fast_exp2(softcap * t * core::kLog2e - lse_log2);
      p = visible ? p : 0.0f;
      *pg = p * (1.0f - t * t);  // d(c tanh(x / c))/dx = 1 - tanh^2
      return p;
    } else {
      // exp2 unconditionally, then a select: a conditional exp2 compiles to a branch per element.
      const float e = fast_exp2(s * scale_log2 - lse_log2);
      const float p = visible ? e : 0.0f;
      *pg = p;
      return p;
    }
  }

  // Both at once, for callers that hold S and dP together.
  __device__ __forceinline__ void p_ds(float s, float dp, float lse_log2, float delta, bool visible, float* p,
                                       float* ds) const {
    float pg;
    *p = p_of(s, lse_log2, visible, &pg);
    *ds = pg * (dp - delta);
  }
};

// ---- Mask geometry -------------------------------------------------------------------------------------

// Query rows that see at least one key of [n0, n1) (0 <= n0 < n1 <= seqlen_k): [first, last), maybe empty.
// key_end(i) and key_begin(i) grow with i (core/mask.h), so the rows form one interval:
//   key_end(i)   > n0  <=>  i + shift + window_right + 1 > n0
//   key_begin(i) < n1  <=>  i + shift - window_left     < n1      (shift = seqlen_k - seqlen_q)
struct RowRange {
  int64_t first = 0, last = 0;
};
__device__ __forceinline__ RowRange query_rows_seeing(const core::MaskSpec& m, int64_t n0, int64_t n1) {
  const int64_t shift = m.seqlen_k - m.seqlen_q;
  RowRange r{0, m.seqlen_q};
  if (m.has_right()) r.first = max(r.first, n0 - shift - m.window_right);
  if (m.has_left()) r.last = min(r.last, n1 - shift + m.window_left);
  return r;
}

// The visible key interval of one row, as ints for cheap per-element compares on boundary tiles.
struct RowKeys {
  int begin, end;
  __device__ __forceinline__ static RowKeys of(const core::MaskSpec& m, int row) {
    return RowKeys{int(m.key_begin(row)), int(m.key_end(row))};
  }
  __device__ __forceinline__ bool sees(int key) const { return key >= begin && key < end; }
};

// The 16 x 16 block of two neighbouring mma tiles of one warp, packed to 16-bit pairs, into a row-major
// shared tile: lo_j / hi_j are rows g / g + 8 of tile j (columns 2 t4, 2 t4 + 1; tile 1 is 8 columns to the
// right). sm90 with kMatrix: one stmatrix.x4, which takes the fragment registers as they are (lane l gives
// the address of row l % 8 of its matrix, 8 rows lower for l / 8 odd, 8 columns right for l >= 16);
// otherwise four 4-byte stores.
template <bool kMatrix, typename T>
__device__ __forceinline__ void store_tile_pair(T* tile, int stride, int row0, int col0, uint32_t lo0, uint32_t hi0,
                                                uint32_t lo1, uint32_t hi1, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kMatrix) {
    const T* row = tile + (row0 + lane % 8 + (lane / 8) % 2 * 8) * stride + col0 + lane / 16 * 8;
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(row)),
                 "r"(lo0), "r"(hi0), "r"(lo1), "r"(hi1)
                 : "memory");
    return;
  }
#endif
  T* const p = tile + (row0 + lane / 4) * stride + col0 + 2 * (lane % 4);
  *reinterpret_cast<uint32_t*>(p) = lo0;
  *reinterpret_cast<uint32_t*>(p + 8 * stride) = hi0;
  *reinterpret_cast<uint32_t*>(p + 8) = lo1;
  *reinterpret_cast<uint32_t*>(p + 8 * stride + 8) = hi1;
}

// ---- Global fp32 accumulation --------------------------------------------------------------------------

// dst[0..3] += v (16-byte aligned), fire-and-forget. sm90 has a vector reduction, one instruction for
// the four: against 8-byte reductions, 4-byte ones measured 0.83x and these 1.03-1.07x on the H200
// (bench/results/h200-20261202-fa2-bwd-dq-ab/, h200-20261203-fa2-bwd-dq-red4/). atomicAdd(float4*) would
// compile to an atom that returns the old values.
__device__ __forceinline__ void atomic_add4(float* dst, float x, float y, float z, float w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(x), "f"(y), "f"(z), "f"(w)
               : "memory");
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
  atomicAdd(dst + 2, z);
  atomicAdd(dst + 3, w);
#endif
}

// Row of the workspaces for (batch b, row) in the packed [total_q, ...] order.
__device__ __forceinline__ int64_t packed_q_row(const AttnParams& a, int b, int row) {
  return a.cu_q ? int64_t(a.cu_q[b]) + row : int64_t(b) * a.seqlen_q + row;
}

// The dQ accumulator (Workspace::dq_accum) holds one mma accumulator tile (16 rows x 8 columns of one
// head) in 512 contiguous bytes, as the fragments hold it: lane (g, t4)'s four values, rows g and g + 8 at
// columns 2 t4 and 2 t4 + 1, side by side at float 16 g + 4 t4. Tiles go [row / 16][head][column / 8]. A
// fragment then leaves with one 16-byte reduction, straight from its accumulator registers, and a warp's
// reduction instruction covers four whole 128-byte lines. Each sequence owns whole 16-row blocks: its rows
// start at accum_row0 (its packed row rounded up to 16, plus 16 per sequence before it), so the rows past
// its end in its last block are its own (they add the zeros of padding rows) and the kernel adds whole
// tiles without row tests. accum_rows() rows in all: total_q plus at most 31 per sequence (attention.h
// states the workspace for users).
constexpr int kAccumTileRows = 16, kAccumTileCols = 8, kAccumTileFloats = kAccumTileRows * kAccumTileCols;
__host__ __device__ __forceinline__ int64_t accum_row0(int64_t packed_row0, int b) {
  return (packed_row0 + kAccumTileRows - 1) / kAccumTileRows * kAccumTileRows + int64_t(kAccumTileRows) * b;
}
inline int64_t accum_rows(int64_t total_q, int64_t batch) { return accum_row0(total_q, int(batch)); }
// Float offset of the tile (16-row block row_block, head h, 8-column tile ct) for heads_q heads.
__device__ __forceinline__ int64_t accum_tile(int64_t row_block, int h, int ct, int heads_q, int col_tiles) {
  return ((row_block * heads_q + h) * col_tiles + ct) * kAccumTileFloats;
}
// Start of the per-row workspace (LSE, D) of (b, h).
__device__ __forceinline__ int64_t row_vec_base(const AttnParams& a, const Workspace& ws, int b, int h) {
  return (int64_t(b) * a.heads_q + h) * ws.rows_pad;
}

}  // namespace flashattn::cuda::fa2_bwd
