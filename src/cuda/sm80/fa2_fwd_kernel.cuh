// FlashAttention-2 forward on sm80+ (FA2 paper, Algorithm 1, with FA2's parallelism).
//
// Grid: (Q tiles, heads_q, batch). A CTA owns kBlockM query rows; each warp owns its own 16-row slices
// of them, so softmax statistics never cross warps. Q is loaded once; K/V tiles of kBlockN keys come by
// cp.async, double-buffered or single-buffered with the loads interleaved (FwdConfig::kStages), visited
// from the last KV block of the tile's range to the first (the partially masked blocks at the causal
// diagonal and the sequence end come first). S = Q K^T and
// O += P V run on mma.sync.m16n8k16 with fp32 accumulators; the softmax is online, in log2 units, and O
// stays unnormalized until the epilogue (deferred normalization). At head dim 64 the loop is skewed
// (FwdConfig::kSkewPv): each step issues the P V of the block before it beside its own exponentials.
#pragma once

#include <type_traits>

#include "core/column_mask.h"
#include "core/mask.h"
#include "core/numeric.h"
#include "core/softmax_online.h"
#include "cuda/common/problem_params.cuh"
#include "cuda/common/ptx_sm80.cuh"
#include "cuda/sm80/fa2_common.cuh"

namespace flashattn::cuda::fa2 {

// Turns raw dot products into scores: kept as they are with a positive scale and no softcap (the row max
// is taken on them and the scale folds into the exponent: one FFMA and one exp2 per score, as in FA2), or
// c * tanh(s * scale / c) with a softcap c (kSoftcap, the kernel's template parameter), or
// s * scale * log2(e) with a negative scale (the max after scaling keeps it correct).
// p.score_mult takes each to log2 units. The factors are read from the kernel parameters (constant
// memory) rather than kept in registers, and the branches sit outside the element loops: inside them the
// compiler would evaluate both sides (tanhf for every score) and keep both sets of temporaries live.
template <bool kSoftcap, int kMTiles, int kNTiles>
__device__ __forceinline__ void scale_scores(float (&s)[kMTiles][kNTiles][4], const AttnParams& p) {
  if constexpr (kSoftcap) {
    const float inner = p.scale / p.softcap;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          // tanhf, not tanh.approx: the approximation's error is as large as a 16-bit rounding.
          s[mt][nt][e] = tanhf(s[mt][nt][e] * inner) * p.softcap;
  } else if (!(p.scale_log2 > 0.0f)) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] *= p.scale_log2;
  }
}

// x * mult - base: one FFMA, or (kFold false) a rounded product and a subtraction, as FA2's kernels had
// before the fold (head dims 192 and 256; the fold measured 1% slower at 256).
template <bool kFold>
__device__ __forceinline__ float to_log2_minus(float x, float mult, float base) {
  if constexpr (kFold) return fmaf(x, mult, -base);
  return __fmul_rn(x, mult) - base;
}

// Per-thread state of one warp's query slices. Thread (g = lane / 4, t = lane % 4) holds rows g and g + 8
// of every slice ("half" 0 and 1 below) and, of those rows, the accumulator columns 2t and 2t + 1 of
// every n8 tile (the mma.sync C layout in ptx_sm80.cuh).
template <typename Cfg>
struct WarpState {
  float o[Cfg::kMTiles][Cfg::kDTiles][4];   // unnormalized output
  float row_max[Cfg::kMTiles][2];           // running max, log2 units; -inf until a visible key is seen
  float row_sum[Cfg::kMTiles][2];           // this thread's part of the running sum (quad-reduced at the end)
};

// ldmatrix row addresses (see ptx_sm80.cuh for the fragment layouts), as (lane's row, lane's chunk):
//   Q (A operand): matrices {rows 0-7, 8-15} x {cols 0-7, 8-15}, in a0..a3 order.
//   K (B operand, keys are the n dim): {keys 0-7: d 0-7, d 8-15}, {keys 8-15: d 0-7, d 8-15}, so that
//     each n8 fragment is a register pair of the load ({kb0, kb1}, {kb2, kb3}), as mma wants it.
//   V (B operand through .trans, keys are the k dim): {d 0-7: keys 0-7, 8-15}, {d 8-15: keys 0-7, 8-15}.
// (With swizzled rows K once read V's lane mapping to share its lane offset; its fragments were then
// {kb0, kb2} and {kb1, kb3}, and the compiler paired them with two moves per fragment, about 200 per
// block at head dim 256.)

// S = Q K^T of one block, into s.
template <typename Cfg, typename T>
__device__ __forceinline__ void block_qk(float (&s)[Cfg::kMTiles][Cfg::kNTiles][4], const T* sQ_warp, const T* sK,
                                         int lane) {
  const int q_row = lane % 16, q_col = (lane / 16) * 8;  // Q's rows are always padded
  const LaneRows<typename Cfg::KvRows> k_lane((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < Cfg::kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;

#pragma unroll
  for (int ks = 0; ks < Cfg::kQkSteps; ++ks) {
    uint32_t a[Cfg::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt)
      ldmatrix_x4(a[mt], sQ_warp + (mt * kMmaM + q_row) * Cfg::kQStride + ks * kMmaK + q_col);
#pragma unroll
    for (int np = 0; np < Cfg::kNTiles / 2; ++np) {
      uint32_t kb[4];
      ldmatrix_x4(kb, sK + k_lane.at(np * 16, ks * 2));
      const uint32_t b_lo[2] = {kb[0], kb[1]};
      const uint32_t b_hi[2] = {kb[2], kb[3]};
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
        mma_16816<T>(s[mt][2 * np], a[mt], b_lo);
        mma_16816<T>(s[mt][2 * np + 1], a[mt], b_hi);
      }
    }
  }
}

// The scores of a block (scale_scores), the per-element mask applied as -inf (kMasked), and each row's
// block maximum in log2 units.
template <bool kMasked, bool kSoftcap, typename Cfg>
__device__ __forceinline__ void block_max(float (&s)[Cfg::kMTiles][Cfg::kNTiles][4],
                                          float (&tile_max)[Cfg::kMTiles][2], const AttnParams& p, int lane,
                                          int len_q, int len_k, int first_row, int first_key) {
  const int g = lane / 4, t = lane % 4;
  scale_scores<kSoftcap>(s, p);
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // Visible columns of this thread's row, relative to its first column (first_key + 2t), one bit each
      // (element (nt, e) holds column 8 nt + e), so that each element's test is a bit of one register.
      using Columns = core::ColumnMask<Cfg::kNTiles>;
      typename Columns::Word visible = 0;
      if constexpr (kMasked) {
        // Rebuilt here (p.mask(batch), in 32-bit arithmetic) so that it is not held in registers across the
        // KV loop for the fully visible blocks.
        const core::MaskSpec32 mask = p.mask32(len_q, len_k);
        const int row = first_row + mt * kMmaM + g + half * 8;
        const int col0 = first_key + 2 * t;
        visible = Columns::visible(mask.key_begin(row) - col0, mask.key_end(row) - col0);
      }
      float m = core::kNegInf;
#pragma unroll
      for (int nt = 0; nt < Cfg::kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float x = s[mt][nt][2 * half + e];
          if constexpr (kMasked) {
            if (!((visible >> Columns::bit(nt, e)) & 1)) x = core::kNegInf;
          }
          s[mt][nt][2 * half + e] = x;
          m = fmaxf(m, x);
        }
      }
      tile_max[mt][half] = quad_max(m) * p.score_mult;  // the max commutes with the positive factor
    }
  }
}

// FA4's conditional rescale: whether some row of the warp sees its max grow by more than
// core::kRescaleThresholdLog2 (always true above kConditionalRescale's head dims). See attend_block.
template <typename Cfg>
__device__ __forceinline__ bool block_needs_rescale(const WarpState<Cfg>& st,
                                                    const float (&tile_max)[Cfg::kMTiles][2]) {
  bool rescale = true;
  if constexpr (Cfg::kConditionalRescale) {
    bool grow = false;
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        grow |= tile_max[mt][half] - st.row_max[mt][half] > core::kRescaleThresholdLog2;
    rescale = __any_sync(0xffffffffu, grow);
  }
  return rescale;
}

// Row (mt, half) moves to max new_max: returns the factor exp2(old - new) its O and sum take, the sum
// scaled here. -inf - -inf is NaN: a row that has seen only masked keys keeps factor 1 (its O and sum are 0).
template <typename Cfg>
__device__ __forceinline__ float rescale_row(WarpState<Cfg>& st, int mt, int half, float new_max) {
  const float factor = new_max == core::kNegInf ? 1.0f : fast_exp2(st.row_max[mt][half] - new_max);
  st.row_max[mt][half] = new_max;
  st.row_sum[mt][half] *= factor;
  return factor;
}

// P of a block as packed 16-bit pairs ([slice][n8 tile][row half]) from its scores and the rows' stored
// maxima; the fp32 probabilities added to the row sums.
template <typename Cfg, typename T>
__device__ __forceinline__ void block_probs(WarpState<Cfg>& st, const float (&s)[Cfg::kMTiles][Cfg::kNTiles][4],
                                            uint32_t (&p16)[Cfg::kMTiles][Cfg::kNTiles][2], const AttnParams& p) {
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // A row that has seen only masked keys subtracts 0 instead of -inf, which sends its exp2(-inf)
      // terms to 0.
      const float base = st.row_max[mt][half] == core::kNegInf ? 0.0f : st.row_max[mt][half];
      // The row sum adds the fp32 probabilities: summing the 16-bit P instead would put its rounding
      // (up to 2^-8 relative in bf16) into the LSE.
      float tile_sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < Cfg::kNTiles; ++nt) {
        const float p0 = fast_exp2(to_log2_minus<Cfg::kFoldScale>(s[mt][nt][2 * half], p.score_mult, base));
        const float p1 = fast_exp2(to_log2_minus<Cfg::kFoldScale>(s[mt][nt][2 * half + 1], p.score_mult, base));
        tile_sum += p0 + p1;
        p16[mt][nt][half] = pack2<T>(p0, p1);
      }
      st.row_sum[mt][half] += tile_sum;
    }
  }
}

// O += P V. The C fragment of S tiles 2kk and 2kk+1 is exactly the A fragment of P for keys
// [16kk, 16kk + 16) (a0 = row g of tile 2kk, a1 = row g+8 of tile 2kk, a2/a3 the same of tile 2kk+1),
// so P goes to the tensor cores without touching shared memory. kFence: see below.
template <bool kFence, typename Cfg, typename T>
__device__ __forceinline__ void block_pv(WarpState<Cfg>& st, const uint32_t (&p16)[Cfg::kMTiles][Cfg::kNTiles][2],
                                         const T* sV, int lane) {
  const LaneRows<typename Cfg::KvRows> v_lane(lane % 16, lane / 16);
#pragma unroll
  for (int kk = 0; kk < Cfg::kPvSteps; ++kk) {
    uint32_t a[Cfg::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
      a[mt][0] = p16[mt][2 * kk][0];
      a[mt][1] = p16[mt][2 * kk][1];
      a[mt][2] = p16[mt][2 * kk + 1][0];
      a[mt][3] = p16[mt][2 * kk + 1][1];
    }
    if (kFence && kk == 0) {
      // Scheduling fence: the first P V mma of every slice depends on all row sums (the select never
      // fires, sums are >= 0). Without it ptxas starts P V early and defers the sum's FADDs, keeping
      // every fp32 probability live next to the accumulators, which spills the hd128 kernel.
      float all_sums = 0.0f;
#pragma unroll
      for (int m = 0; m < Cfg::kMTiles; ++m) all_sums += st.row_sum[m][0] + st.row_sum[m][1];
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt) a[mt][0] = all_sums < 0.0f ? 0u : a[mt][0];
    }
#pragma unroll
    for (int dp = 0; dp < Cfg::kDTiles / 2; ++dp) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, sV + v_lane.at(kk * kMmaK, dp * 2));
      const uint32_t b_lo[2] = {vb[0], vb[1]};
      const uint32_t b_hi[2] = {vb[2], vb[3]};
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
        mma_16816<T>(st.o[mt][2 * dp], a[mt], b_lo);
        mma_16816<T>(st.o[mt][2 * dp + 1], a[mt], b_hi);
      }
    }
  }
}

// One KV block: S = Q K^T, after_qk(), online softmax, O += P V. kMasked applies the per-element mask
// (blocks that cross a mask boundary or the end of the keys); fully visible blocks skip it. after_qk is
// where the single-buffered pipeline waits for V and starts the next K, which then loads under the softmax
// and P V (CTA-wide: every thread calls it).
template <bool kMasked, bool kSoftcap, typename Cfg, typename T, typename AfterQk>
__device__ __forceinline__ void attend_block(WarpState<Cfg>& st, const AttnParams& p, const T* sQ_warp,
                                             const T* sK, const T* sV, int lane, int len_q, int len_k,
                                             int first_row, int first_key, AfterQk&& after_qk) {
  float s[Cfg::kMTiles][Cfg::kNTiles][4];
  block_qk<Cfg>(s, sQ_warp, sK, lane);
  after_qk();
  float tile_max[Cfg::kMTiles][2];
  block_max<kMasked, kSoftcap, Cfg>(s, tile_max, p, lane, len_q, len_k, first_row, first_key);
  // FA4's conditional rescale: the rows keep their stored max, and O and the sums their scale, unless some
  // row of the warp sees its max grow by more than core::kRescaleThresholdLog2 (the first visible block
  // always does: the stored max is -inf). Meanwhile probabilities reach at most 2^8, which the 16-bit P and
  // the fp32 sums hold exactly as well as values up to 1; the final O / l and LSE = max + log2(l) use the
  // stored max either way.
  // Above kConditionalRescale's head dims every block rescales.
  if (block_needs_rescale<Cfg>(st, tile_max)) {
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float factor = rescale_row(st, mt, half, fmaxf(st.row_max[mt][half], tile_max[mt][half]));
#pragma unroll
        for (int dt = 0; dt < Cfg::kDTiles; ++dt) {
          st.o[mt][dt][2 * half] *= factor;
          st.o[mt][dt][2 * half + 1] *= factor;
        }
      }
    }
  }
  uint32_t p16[Cfg::kMTiles][Cfg::kNTiles][2];
  block_probs<Cfg, T>(st, s, p16, p);
  block_pv</*kFence=*/true, Cfg, T>(st, p16, sV, lane);
}

// One step of the skewed loop (FwdConfig::kSkewPv): S of block n and its row statistics, then P V of the
// block before it (kPv; its P in p16, its V in sV_prev) beside the exponentials of block n, then O
// rescaled, and p16 holds block n's P for the next step. The P V and the exponentials depend on nothing
// of each other, so the tensor-core and the MUFU/FMA work of one warp interleave in one basic block.
// O before the P V is at the previous maxima, as that block's P is; it is rescaled once the P V is in.
template <bool kMasked, bool kPv, bool kSoftcap, typename Cfg, typename T>
__device__ __forceinline__ void skew_block(WarpState<Cfg>& st, uint32_t (&p16)[Cfg::kMTiles][Cfg::kNTiles][2],
                                           const AttnParams& p, const T* sQ_warp, const T* sK, const T* sV_prev,
                                           int lane, int len_q, int len_k, int first_row, int first_key) {
  float s[Cfg::kMTiles][Cfg::kNTiles][4];
  block_qk<Cfg>(s, sQ_warp, sK, lane);
  float tile_max[Cfg::kMTiles][2];
  block_max<kMasked, kSoftcap, Cfg>(s, tile_max, p, lane, len_q, len_k, first_row, first_key);
  const bool rescale = block_needs_rescale<Cfg>(st, tile_max);
  // New maxima by selects (no branch before the P V): unchanged rows get factor exp2(0) = 1.
  float factor[Cfg::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float old_max = st.row_max[mt][half];
      factor[mt][half] = rescale_row(st, mt, half, rescale ? fmaxf(old_max, tile_max[mt][half]) : old_max);
    }
  }
  if constexpr (kPv) block_pv</*kFence=*/false, Cfg, T>(st, p16, sV_prev, lane);
  block_probs<Cfg, T>(st, s, p16, p);
  if (rescale) {
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt)
#pragma unroll
      for (int dt = 0; dt < Cfg::kDTiles; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[mt][dt][e] *= factor[mt][e / 2];
  }
}

template <typename T>
struct LoopUniforms {
  const T* k_seq;  // K and V of this (batch, kv_head) sequence
  const T* v_seq;
  int vis_lo, vis_hi;  // KV blocks [vis_lo, vis_hi) need no per-element mask
};

// kSoftcap: the call has a softcap (p.softcap > 0); two instantiations, picked at launch, so that the
// kernels without one carry no tanh code (it cost the head-dim-128 kernel a 16-byte spill on sm_80 and
// the head-dim-64 one 30 registers).
template <typename Cfg, typename T, bool kSoftcap>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm) fa2_fwd_kernel(const AttnParams p) {
  constexpr int kQStride = Cfg::kQStride;
  // 128-byte aligned: the static `uni` below comes first, and swizzled rows need a 32-byte aligned base
  // (fa2_common.cuh).
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + Cfg::kQElems;                       // [kStages][kBlockN][kKvStride]
  T* sV = sK + Cfg::kStages * Cfg::kKvElems;       // [kStages][kBlockN][kKvStride]

  // Q tiles in reverse launch order: with causal masks the last tiles see the most keys, so they start first.
  const int m_block = int(gridDim.x) - 1 - int(blockIdx.x);
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int len_q = p.len_q(batch);
  const int row_begin = m_block * Cfg::kBlockM;
  if (row_begin >= len_q) return;  // varlen: this sequence is shorter (or empty)
  const int len_k = p.len_k(batch);
  const int row_end = min(row_begin + Cfg::kBlockM, len_q);
  const core::MaskSpec mask = p.mask(batch);
  const core::BlockRange range = core::kv_block_range(mask, row_begin, row_end, Cfg::kBlockN);

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int warp_row = warp * Cfg::kRowsPerWarp;  // first tile row of this warp
  const int kv_head = head / (p.heads_q / p.heads_kv);

  const T* q_tile = static_cast<const T*>(p.q.ptr) + batch * p.q.batch_stride +
                    (int64_t(p.q_offset(batch)) + row_begin) * p.q.row_stride + head * p.q.head_stride;
  // Q's copies go out first: the tile's remaining setup (K/V pointers, mask, block range) runs under them.
  // They join the first K block's copy group below.
  TileLoader<Cfg::kBlockM, Cfg::kHeadDim, kQStride, Cfg::kThreads>(tid).load(sQ, q_tile, int(p.q.row_stride),
                                                                          row_end - row_begin, p.head_dim);
  const T* k_seq = static_cast<const T*>(p.k.ptr) + batch * p.k.batch_stride +
                   int64_t(p.k_offset(batch)) * p.k.row_stride + kv_head * p.k.head_stride;
  const T* v_seq = static_cast<const T*>(p.v.ptr) + batch * p.v.batch_stride +
                   int64_t(p.k_offset(batch)) * p.v.row_stride + kv_head * p.v.head_stride;

  WarpState<Cfg> st;
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      st.row_max[mt][half] = core::kNegInf;
      st.row_sum[mt][half] = 0.0f;
    }
#pragma unroll
    for (int dt = 0; dt < Cfg::kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st.o[mt][dt][e] = 0.0f;
  }

  // CTA-uniform values the KV loop reads once per block live in shared memory: in registers they would
  // stay live through every mma next to the accumulators, which pushes the hd128 kernel over 255
  // registers (ptxas then spills exactly these).
  __shared__ LoopUniforms<T> uni;

  const TileLoader<Cfg::kBlockN, Cfg::kHeadDim, Cfg::kKvStride, Cfg::kThreads, Cfg::KvRows::kSwizzled> kv_loader(tid);
  // Up to head dim 128 the block's first row is formed once (block_pointer); head dims 192 and 256 keep the
  // chunk addresses folded: with fewer address instructions between them their copies ran slower
  // (docs/performance.md).
  constexpr bool kBlockPointer = Cfg::kHeadDim <= 128;
  auto load_k = [&](const T* k_base, int n_block, int stage) {
    const int key0 = n_block * Cfg::kBlockN;
    kv_loader.load(sK + stage * Cfg::kKvElems, block_pointer<kBlockPointer>(k_base + key0 * p.k.row_stride),
                   int(p.k.row_stride), len_k - key0, p.head_dim);
  };
  auto load_v = [&](const T* v_base, int n_block, int stage) {
    const int key0 = n_block * Cfg::kBlockN;
    kv_loader.load(sV + stage * Cfg::kKvElems, block_pointer<kBlockPointer>(v_base + key0 * p.v.row_stride),
                   int(p.v.row_stride), len_k - key0, p.head_dim);
  };
  // Whether block n_block needs no per-element mask. The double-buffered loops read it, and the K/V pointers,
  // from `uni` right after their barrier, before they issue the block's copies: read where they were used,
  // the shared loads came after the copies' address arithmetic and their latency sat right before the mask
  // branch.
  auto block_visible = [&](int n_block) { return n_block >= uni.vis_lo && n_block < uni.vis_hi; };
  // Block n_block from K/V buffer `stage`, masked unless `visible`.
  auto attend = [&](int n_block, int stage, bool visible, auto&& after_qk) {
    const T* sK_stage = sK + stage * Cfg::kKvElems;
    const T* sV_stage = sV + stage * Cfg::kKvElems;
    const T* sQ_warp = sQ + warp_row * kQStride;
    const int row0 = row_begin + warp_row, key0 = n_block * Cfg::kBlockN;
    if (visible)
      attend_block</*kMasked=*/false, kSoftcap>(st, p, sQ_warp, sK_stage, sV_stage, lane, len_q, len_k, row0, key0,
                                                after_qk);
    else
      attend_block</*kMasked=*/true, kSoftcap>(st, p, sQ_warp, sK_stage, sV_stage, lane, len_q, len_k, row0, key0,
                                               after_qk);
  };

  // A tile whose rows see no key at all skips the loop: O = 0 and LSE = -inf from the zero state.
  if (!range.empty()) {
    // Blocks that need no per-element mask: MaskSpec::tile_fully_visible solved for the block index.
    // Block n is fully visible when n * kBlockN >= key_begin(last row) and
    // (n + 1) * kBlockN <= key_end(first row) (which is at most seqlen_k), i.e. n in [vis_lo, vis_hi).
    if (tid == 0) {
      uni.k_seq = k_seq;
      uni.v_seq = v_seq;
      uni.vis_lo = int((mask.key_begin(row_end - 1) + Cfg::kBlockN - 1) / Cfg::kBlockN);
      uni.vis_hi = int(mask.key_end(row_begin) / Cfg::kBlockN);
    }
    const int n_first = int(range.first);
    if constexpr (Cfg::kSkewPv && Cfg::kStages == 2) {
      // Skewed loop: step n computes S of block n and P V of block n + 1 (skew_block). The ring holds K
      // one block ahead of V: the group that lands for step n carries K of block n and V of block n + 1,
      // in buffers `stage` and `stage ^ 1`; the step then loads K of block n - 1 into the other K buffer
      // (block n + 1's, whose S every warp has finished: the barrier) and V of block n into V buffer
      // `stage` (block n + 2's, whose P V every warp has finished).
      const T* sQ_warp = sQ + warp_row * kQStride;
      const int row0 = row_begin + warp_row;
      uint32_t p16[Cfg::kMTiles][Cfg::kNTiles][2];  // P of the block whose P V is next
      int n_block = int(range.last) - 1;
      int stage = 0;
      load_k(k_seq, n_block, 0);
      cp_async_commit();
      auto step = [&](auto pv) {
        constexpr bool kPv = decltype(pv)::value;
        cp_async_wait<0>();
        __syncthreads();
        const bool visible = block_visible(n_block);
        const T* k_base = uni.k_seq;
        const T* v_base = uni.v_seq;
        if (n_block > n_first) load_k(k_base, n_block - 1, stage ^ 1);
        load_v(v_base, n_block, stage);
        cp_async_commit();
        const T* sK_stage = sK + stage * Cfg::kKvElems;
        const T* sV_prev = sV + (stage ^ 1) * Cfg::kKvElems;
        const int key0 = n_block * Cfg::kBlockN;
        if (visible)
          skew_block</*kMasked=*/false, kPv, kSoftcap>(st, p16, p, sQ_warp, sK_stage, sV_prev, lane, len_q, len_k,
                                                       row0, key0);
        else
          skew_block</*kMasked=*/true, kPv, kSoftcap>(st, p16, p, sQ_warp, sK_stage, sV_prev, lane, len_q, len_k,
                                                      row0, key0);
      };
      step(std::false_type{});  // the tile's first block: no P V before it
      for (--n_block; n_block >= n_first; --n_block) {
        stage ^= 1;
        step(std::true_type{});
      }
      // The last block's P V.
      cp_async_wait<0>();
      __syncthreads();
      block_pv</*kFence=*/false, Cfg, T>(st, p16, sV + stage * Cfg::kKvElems, lane);
    } else if constexpr (Cfg::kStages == 2) {
      int stage = 0;
      load_k(k_seq, int(range.last) - 1, stage);
      load_v(v_seq, int(range.last) - 1, stage);
      cp_async_commit();
      for (int n_block = int(range.last) - 1; n_block >= n_first; --n_block) {
        cp_async_wait<0>();
        // Makes this block's K/V (and Q, and `uni`) visible to every warp, and proves every warp is done
        // reading the other buffer (the previous block), which the prefetch below overwrites.
        __syncthreads();
        const bool visible = block_visible(n_block);
        const T* k_base = uni.k_seq;
        const T* v_base = uni.v_seq;
        if (n_block > n_first) {
          load_k(k_base, n_block - 1, stage ^ 1);
          load_v(v_base, n_block - 1, stage ^ 1);
          cp_async_commit();
        }
        attend(n_block, stage, visible, [] {});
        stage ^= 1;
      }
    } else {
      load_k(k_seq, int(range.last) - 1, 0);
      cp_async_commit();
      for (int n_block = int(range.last) - 1; n_block >= n_first; --n_block) {
        cp_async_wait<0>();
        // K of this block (and Q, and `uni`) visible to every warp; every warp is done reading V (the
        // previous block's P V), which the load below overwrites.
        __syncthreads();
        load_v(uni.v_seq, n_block, 0);
        cp_async_commit();
        // Here (head dims 192 and 256) the mask range is read after the copies: read before them, as in the
        // loops above, these kernels measured 1.5-2% slower (bench/results/h200-20261205-fa2-fwd-loop-top).
        attend(n_block, 0, block_visible(n_block), [&] {
          cp_async_wait<0>();
          // V visible to every warp; every warp is done reading K (its Q K^T of this block).
          __syncthreads();
          if (n_block > n_first) {
            load_k(uni.k_seq, n_block - 1, 0);
            cp_async_commit();
          }
        });
      }
    }
  }

  if (range.empty()) {
    // No key for any row: Q's copies, issued by every thread into every row, must land before the epilogue
    // writes O over them.
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  }

  // Epilogue. Each warp stages its own rows of O in its own rows of sQ (only this warp ever read them),
  // then writes them out with 16-byte coalesced stores.
  const int g = lane / 4, t = lane % 4;
  T* sO = sQ + warp_row * kQStride;
  __syncwarp();
  float* lse = static_cast<float*>(p.lse.ptr);
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = quad_sum(st.row_sum[mt][half]);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // rows that see no key: O = 0
      const int tile_row = mt * kMmaM + g + half * 8;
      const int row = row_begin + warp_row + tile_row;
      if (lse != nullptr && t == 0 && row < len_q) {
        const float value = sum > 0.0f ? (st.row_max[mt][half] + __log2f(sum)) * core::kLn2 : core::kNegInf;
        lse[batch * p.lse.batch_stride + head * p.lse.head_stride +
            (int64_t(p.q_offset(batch)) + row) * p.lse.row_stride] = value;
      }
#pragma unroll
      for (int dt = 0; dt < Cfg::kDTiles; ++dt) {
        const uint32_t packed = pack2<T>(st.o[mt][dt][2 * half] * inv, st.o[mt][dt][2 * half + 1] * inv);
        *reinterpret_cast<uint32_t*>(sO + tile_row * kQStride + dt * kMmaN + 2 * t) = packed;
      }
    }
  }
  __syncwarp();
  T* out_tile = static_cast<T*>(p.out.ptr) + batch * p.out.batch_stride +
                (int64_t(p.q_offset(batch)) + row_begin + warp_row) * p.out.row_stride + head * p.out.head_stride;
  constexpr int kWarpChunks = Cfg::kRowsPerWarp * Cfg::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < kWarpChunks / kWarpSize; ++i) {
    const int idx = lane + i * kWarpSize;
    const int r = idx / Cfg::kChunksPerRow;
    const int col = (idx % Cfg::kChunksPerRow) * kChunkElems;
    if (row_begin + warp_row + r < len_q && col < p.head_dim)
      *reinterpret_cast<uint4*>(out_tile + r * p.out.row_stride + col) =
          *reinterpret_cast<const uint4*>(sO + r * kQStride + col);
  }
}

}  // namespace flashattn::cuda::fa2
