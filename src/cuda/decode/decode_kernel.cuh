// Split-KV attention over a KV cache (Flash-Decoding) on sm80+: mma.sync for Q K^T and P V, warp-private
// cp.async rings, packed GQA rows, and the LSE merge of the splits in the last CTA to finish each tile.
//
// Grid: (splits, heads_kv * m_tiles, batch). A CTA owns the kRowsPerTile packed query rows of one tile
// (packed row R = query token i * group + query head g of the KV head) and one split of the keys those rows
// can see. The split is cut into kKeysPerBlock-key blocks; warp w walks blocks w, w + kWarps, ... with its
// own online-softmax state, streaming K and V through a warp-private ring (no CTA barrier in the loop).
// Then the warps' states are merged in shared memory, and the CTA either writes the final rows (a tile
// with one split) or a normalized fp32 partial output and its LSE to the workspace. The last CTA of a tile
// to arrive (atomic ticket) merges the partials: lse = log sum_i exp(lse_i), out = sum_i exp(lse_i - lse) o_i.
// On sm90 the wide kernel may instead run with each tile's splits as one thread block cluster and merge them
// over distributed shared memory (kClusterMerge, merge_cluster).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/mask.h"
#include "core/numeric.h"
#include "core/softmax_online.h"
#include "cuda/common/ptx_sm80.cuh"
#include "cuda/decode/decode_config.cuh"

namespace flashattn::cuda::decode {

constexpr unsigned kFullMask = 0xffffffffu;
// Partial outputs of several splits the merge loads at once per thread: enough independent L2 loads in
// flight that the merge's tail is a few L2 round trips, not one per split.
constexpr int kMergeUnroll = 16;

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// The keys a tile's rows can see, in blocks, and how they are split. Every CTA of the tile computes the same
// plan from the same inputs, so they agree on the split count that the ticket counts up to.
struct TilePlan {
  int first_block = 0;       // block of the first visible key
  int blocks = 0;            // blocks that hold visible keys (0: the rows see no key)
  int splits = 1;            // splits this tile uses (<= gridDim.x); CTAs past it exit at once
  int blocks_per_split = 0;
};

__device__ __forceinline__ TilePlan plan_tile(const DecodeParams& p, const core::MaskSpec& mask, int row_first,
                                              int row_last) {
  TilePlan t;
  // key_begin and key_end grow with the query token, so the tile's first and last rows bound its keys.
  const int key_begin = int(mask.key_begin(row_first / p.group));
  const int key_end = int(mask.key_end(row_last / p.group));
  if (key_end <= key_begin) return t;
  t.first_block = key_begin / kKeysPerBlock;
  t.blocks = (key_end + kKeysPerBlock - 1) / kKeysPerBlock - t.first_block;
  int wanted = p.num_splits;
  if (p.min_split_keys > 0) wanted = min(wanted, max(1, (key_end - key_begin) / p.min_split_keys));
  wanted = max(1, min(wanted, t.blocks));
  t.blocks_per_split = (t.blocks + wanted - 1) / wanted;
  // Rounding the share up can leave trailing splits empty: recount so that every split has blocks.
  t.splits = (t.blocks + t.blocks_per_split - 1) / t.blocks_per_split;
  return t;
}

// Shared K and V rows are dense, kHeadDim elements apart, swizzled (cuda/common/smem_swizzle.cuh) on a
// 128-byte aligned base. Every user XORs a per-lane value (the low bits its row and chunk contribute) with a
// compile-time constant and addresses through swizzled_offset, so the offsets stay a few loop-invariant
// registers plus immediates.

// One warp's loads of K/V blocks into its ring. Lane l copies the 16-byte chunks of columns
// col0 + c * kLanesPerRow * 8 of rows row0 + i * kRowsPerPass.
//
// Paged caches: a row's address needs its block-table entry. The entries of the warp's m-th block are
// fetched by cp.async into slot m % kLookupSlots of a warp-private ring in shared memory, in the commit group
// of the step that issues block m - (kStages - 1), i.e. 2 * (kStages - 1) blocks ahead of their use. The
// cp.async.wait_group that proves a step's K/V block complete then also proves complete the entries of the
// block that step issues: no lane ever waits on a block-table load by itself (a lookup in registers one block
// ahead stalled every issue on the table's L2/HBM latency, and cost paged caches 5-14% against contiguous).
template <typename Cfg, typename T>
struct WarpKVLoader {
  const T* k_base;       // this (batch, KV head): contiguous caches include the batch offset
  const T* v_base;
  const int32_t* table;  // this sequence's block-table row; nullptr: contiguous cache
  int32_t* lookups;      // paged: this warp's ring, kLookupSlots x kKeysPerBlock entries
  int64_t k_outer, k_row, v_outer, v_row;
  int len_k, page_size, head_dim;
  IndexLimits limits;
  int row0, col0, lane;
  int swizzle_lane;  // (lane % 8) ^ row0: the low swizzled chunk bits of this lane's copies in row row0

  // Fetches the block-table entries of the warp's m-th block (`block`) into its ring slot (the caller
  // commits). Keys past the sequence are never looked up: their block-table entries may lie past the pages
  // the sequence uses, which validation does not check; their slot gets 0 (zero fill) and their rows are
  // never read.
  __device__ __forceinline__ void fetch_lookups(int m, int block) {
    if (table == nullptr || lane >= kKeysPerBlock) return;
    const int key = block * kKeysPerBlock + lane;
    const bool ok = key < len_k;
    cp_async_4(lookups + (m % Cfg::kLookupSlots) * kKeysPerBlock + lane, table + (ok ? key / page_size : 0), ok);
  }

  // Issues the cp.async copies of the warp's m-th block (`block`) into dst_k / dst_v (the caller commits).
  // Rows past the sequence and columns past head_dim are zero-filled without reading global memory: stale
  // shared data could hold NaN, and 0 * NaN is NaN.
  __device__ __forceinline__ void issue(T* dst_k, T* dst_v, int m, int block) {
    const int key0 = block * kKeysPerBlock;
    const int32_t* entries = lookups + (m % Cfg::kLookupSlots) * kKeysPerBlock;
    // Paged: the slot in its page of this lane's row key, stepped from row to row (one division per block
    // while the rows stay in one page).
    int key = key0 + row0;
    int slot = table != nullptr ? key % page_size : 0;
#pragma unroll
    for (int i = 0; i < Cfg::kRowPasses; ++i) {
      const int r = row0 + i * Cfg::kRowsPerPass;
      const bool row_ok = key0 + r < len_k;
      int64_t k_off, v_off;
      if (table != nullptr) {
        if (i > 0) {
          key += Cfg::kRowsPerPass;
          slot += Cfg::kRowsPerPass;
          if (slot >= page_size) slot = key % page_size;
        }
        const int64_t pg = limits.page(entries[r]);
        k_off = pg * k_outer + int64_t(slot) * k_row;
        v_off = pg * v_outer + int64_t(slot) * v_row;
      } else {
        k_off = int64_t(key0 + r) * k_row;
        v_off = int64_t(key0 + r) * v_row;
      }
      // row0 < kRowsPerPass <= 8 (powers of two), so r % 8 = row0 ^ (i * kRowsPerPass % 8), and the
      // chunk's low three bits are lane % 8 (kLanesPerRow is a multiple of 8): swizzle_lane ^ a constant.
      const int chunk_lo = swizzle_lane ^ ((i * Cfg::kRowsPerPass) % kSwizzleChunks);
#pragma unroll
      for (int c = 0; c < Cfg::kColIters; ++c) {
        const int col = col0 + c * Cfg::kLanesPerRow * kChunkElems;
        const int dst = swizzled_offset<Cfg::kHeadDim>(r, col / (kSwizzleChunks * kChunkElems), chunk_lo);
        const bool ok = row_ok && col < head_dim;
        // With ok false the copy reads nothing (src-size 0), so the address may lie outside the cache.
        cp_async_16_prefetch_128(dst_k + dst, k_base + k_off + col, ok);
        cp_async_16_prefetch_128(dst_v + dst, v_base + v_off + col, ok);
      }
    }
  }
};

// Per-thread online-softmax state of one warp. Thread (g = lane / 4, t = lane % 4) holds tile rows g and
// g + 8 ("half" 0 and 1) and, of those rows, the accumulator columns 2t, 2t + 1 of every n8 tile.
template <typename Cfg>
struct WarpState {
  float o[Cfg::kDTiles][4];  // unnormalized output
  float row_max[2];          // running max, log2 units; -inf until a visible key is seen
  float row_sum[2];          // this thread's part of the running sum (quad-reduced at the end)
  int key_lo[2], key_hi[2];  // visible keys [lo, hi) of the thread's two rows
};

// One block of kKeysPerBlock keys for one warp: S = Q K^T, scale (and softcap), mask, online softmax,
// O += P V (the layout follows fa2::attend_block with one 16-row slice and 16 keys).
template <typename Cfg, typename T>
__device__ __forceinline__ void attend_block(WarpState<Cfg>& st, const DecodeParams& p, const T* sQ, const T* sK,
                                             const T* sV, int lane, int key0) {
  constexpr int kQStride = Cfg::kQStride;
  const int t = lane % 4;
  const int q_row = lane % 16, q_col = (lane / 16) * 8;
  // ldmatrix rows and chunks: K reads row (lane / 16) * 8 + lane % 8 at chunk 2 ks + (lane / 8) % 2, V row
  // lane % 16 at chunk 2 dp + lane / 16; both rows are lane % 8 modulo 8, so the swizzled chunk's low bits
  // are (the lane's own bit ^ lane % 8) ^ 2 (step % 4), and its group is step / 4 (swizzled_offset).
  const int k_row = (lane / 16) * 8 + lane % 8, k_lane = ((lane / 8) % 2) ^ (lane % 8);
  const int v_row = lane % 16, v_lane = (lane / 16) ^ (lane % 8);

  float s[2][4];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < Cfg::kQkSteps; ++ks) {
    uint32_t a[4], kb[4];
    ldmatrix_x4(a, sQ + q_row * kQStride + ks * kMmaK + q_col);
    ldmatrix_x4(kb, sK + swizzled_offset<Cfg::kHeadDim>(k_row, ks / 4, k_lane ^ (2 * (ks % 4))));
    const uint32_t b_lo[2] = {kb[0], kb[1]};
    const uint32_t b_hi[2] = {kb[2], kb[3]};
    mma_16816<T>(s[0], a, b_lo);
    mma_16816<T>(s[1], a, b_hi);
  }

  // Scores in log2 units; with softcap c: c * tanh(s * scale / c) * log2(e). tanhf, not tanh.approx: the
  // approximation's error is as large as a 16-bit rounding.
  if (p.softcap_outer > 0.0f) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = tanhf(s[nt][e] * p.softcap_inner) * p.softcap_outer;
  } else {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] *= p.scale_log2;
  }

  uint32_t p16[2][2];  // P as packed 16-bit pairs: [n8 tile][row half]
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // Columns relative to this thread's first column, so each element's test is against a constant offset.
    const int col0 = key0 + 2 * t;
    const int lo = st.key_lo[half] - col0, hi = st.key_hi[half] - col0;
    float tile_max = core::kNegInf;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = nt * kMmaN + e;
        float x = s[nt][2 * half + e];
        if (col < lo || col >= hi) x = core::kNegInf;
        s[nt][2 * half + e] = x;
        tile_max = fmaxf(tile_max, x);
      }
    tile_max = quad_max(tile_max);
    const float new_max = fmaxf(st.row_max[half], tile_max);
    // -inf - -inf is NaN: a row that has seen only masked keys subtracts 0 instead.
    const float base = new_max == core::kNegInf ? 0.0f : new_max;
    const float factor = fast_exp2(st.row_max[half] - base);
    st.row_max[half] = new_max;
    // The sum adds the fp32 probabilities, not the 16-bit P, so P's rounding stays out of the LSE.
    float tile_sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const float p0 = fast_exp2(s[nt][2 * half] - base);
      const float p1 = fast_exp2(s[nt][2 * half + 1] - base);
      tile_sum += p0 + p1;
      p16[nt][half] = pack2<T>(p0, p1);
    }
    st.row_sum[half] = st.row_sum[half] * factor + tile_sum;
#pragma unroll
    for (int dt = 0; dt < Cfg::kDTiles; ++dt) {
      st.o[dt][2 * half] *= factor;
      st.o[dt][2 * half + 1] *= factor;
    }
  }

  // O += P V: the C fragments of S tiles 0 and 1 are the A fragment of P for these 16 keys.
  const uint32_t a[4] = {p16[0][0], p16[0][1], p16[1][0], p16[1][1]};
#pragma unroll
  for (int dp = 0; dp < Cfg::kDTiles / 2; ++dp) {
    uint32_t vb[4];
    ldmatrix_x4_trans(vb, sV + swizzled_offset<Cfg::kHeadDim>(v_row, dp / 4, v_lane ^ (2 * (dp % 4))));
    const uint32_t b_lo[2] = {vb[0], vb[1]};
    const uint32_t b_hi[2] = {vb[2], vb[3]};
    mma_16816<T>(st.o[2 * dp], a, b_lo);
    mma_16816<T>(st.o[2 * dp + 1], a, b_hi);
  }
}

// Where packed row r of the tile lives in q / out / lse.
struct RowAddress {
  int query;  // token index i
  int head;   // query head
};
__device__ __forceinline__ RowAddress row_address(const DecodeParams& p, int kv_head, int packed_row) {
  return RowAddress{packed_row / p.group, kv_head * p.group + packed_row % p.group};
}

// Writes four output columns of one row (columns past head_dim are padding and are skipped), and the
// row's LSE with the first four.
template <typename T>
__device__ __forceinline__ void store_out(const DecodeParams& p, int batch, RowAddress a, int col, const float (&v)[4],
                                          float lse) {
  T* out = static_cast<T*>(p.out.ptr) + batch * p.out.batch_stride + a.query * p.out.row_stride +
           a.head * p.out.head_stride;
#pragma unroll
  for (int e = 0; e < 4; ++e)
    if (col + e < p.head_dim) out[col + e] = from_float<T>(v[e]);
  if (col == 0 && p.lse.ptr != nullptr)
    static_cast<float*>(p.lse.ptr)[batch * p.lse.batch_stride + a.head * p.lse.head_stride +
                                   a.query * p.lse.row_stride] = lse;
}

// A split's weight in its row's merge, exp(lse_i - lse): splits whose rows saw no key weigh 0, and a row that
// saw none anywhere has lse = -inf (-inf - -inf would be NaN).
__device__ __forceinline__ float split_weight(float lse_i, float lse) {
  return (lse_i == core::kNegInf || lse == core::kNegInf) ? 0.0f : expf(lse_i - lse);
}

// The last CTA of a tile: merges the splits' partial rows. Only L2 (ld.global.cg) is read: the partials were
// written by other SMs, whose writes this SM's L1 does not see. The merge is the kernel's tail (every tile's
// last CTA finishes at about the same time), so it keeps many independent loads in flight: the CTA's
// threads fold the LSEs of its rows (kThreads / kRowsPerTile per row), and each output chunk loads
// kMergeUnroll splits at once.
template <typename Cfg, typename T>
__device__ __forceinline__ void merge_splits(const DecodeParams& p, float* smem, int tile, int splits, int batch,
                                             int kv_head, int row_first, int rows) {
  // The LSE fold gives each row kMergeLanes threads: an aligned group of lanes of one warp.
  constexpr int kMergeLanes = Cfg::kThreads / kRowsPerTile;
  static_assert(Cfg::kThreads % kRowsPerTile == 0 && kMergeLanes <= kWarpSize &&
                    (kMergeLanes & (kMergeLanes - 1)) == 0,
                "the LSE fold needs a power-of-two group of lanes per row");
  constexpr int kCols4 = Cfg::kHeadDim / 4;
  float* s_weight = smem;  // [splits][kRowsPerTile]: lse_i first, then exp(lse_i - lse)
  float* s_lse = smem + kMaxSplits * kRowsPerTile;  // [kRowsPerTile] merged LSE
  const int tid = threadIdx.x;
  const int64_t part = int64_t(tile) * p.num_splits;
  {
    const int r = tid / kMergeLanes, first = tid % kMergeLanes;
    float lse = core::kNegInf;
    if (r < rows) {
#pragma unroll 4
      for (int s = first; s < splits; s += kMergeLanes) {
        const float lse_i = __ldcg(p.partial_lse + (part + s) * kRowsPerTile + r);
        s_weight[s * kRowsPerTile + r] = lse_i;
        lse = core::merge_lse(lse, lse_i);
      }
    }
    // merge_lse is associative: fold the row's kMergeLanes partial results (aligned groups of lanes).
#pragma unroll
    for (int offset = 1; offset < kMergeLanes; offset *= 2)
      lse = core::merge_lse(lse, __shfl_xor_sync(kFullMask, lse, offset));
    if (r < rows) {
      for (int s = first; s < splits; s += kMergeLanes)
        s_weight[s * kRowsPerTile + r] = split_weight(s_weight[s * kRowsPerTile + r], lse);
      if (first == 0) s_lse[r] = lse;
    }
  }
  __syncthreads();
  const int64_t split_stride4 = int64_t(kRowsPerTile) * Cfg::kHeadDim / 4;
  for (int idx = tid; idx < rows * kCols4; idx += Cfg::kThreads) {
    const int r = idx / kCols4, col = (idx % kCols4) * 4;
    const float4* src = reinterpret_cast<const float4*>(p.partial_o + (part * kRowsPerTile + r) * Cfg::kHeadDim + col);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll kMergeUnroll
    for (int s = 0; s < splits; ++s) {
      const float w = s_weight[s * kRowsPerTile + r];
      const float4 v = __ldcg(src + s * split_stride4);
      acc[0] += w * v.x;
      acc[1] += w * v.y;
      acc[2] += w * v.z;
      acc[3] += w * v.w;
    }
    store_out<T>(p, batch, row_address(p, kv_head, row_first + r), col, acc, s_lse[r]);
  }
}

// Cluster merge (sm90; the kernel instantiated with kClusterMerge): a tile's splits are one thread block
// cluster, gridDim.x = cluster size = p.num_splits, so CTA rank s of the cluster is split s. Each CTA has left
// its normalized partial rows and their LSEs in its own shared memory (s_part, s_part_lse); after a cluster
// barrier every CTA reads all splits' LSEs over distributed shared memory, weighs them, and merges its share
// of the tile's rows x columns from the splits' partial rows, with no global round trip. A second barrier
// keeps every CTA (and its shared memory) alive until the others have read it.
template <typename Cfg, typename T>
__device__ __forceinline__ void merge_cluster(const DecodeParams& p, const float* s_part, const float* s_part_lse,
                                              float* smem, int batch, int kv_head, int row_first, int rows) {
  constexpr int kCols4 = Cfg::kHeadDim / 4;
  const int splits = p.num_splits;
  float* s_weight = smem;                             // [splits][kRowsPerTile]: lse_i, then exp(lse_i - lse)
  float* s_lse = smem + kMaxClusterSplits * kRowsPerTile;  // [kRowsPerTile] merged LSE
  const int tid = threadIdx.x;
  cluster_sync();  // every split's partial rows are in its CTA's shared memory
  for (int i = tid; i < splits * kRowsPerTile; i += Cfg::kThreads) {
    const int s = i / kRowsPerTile, r = i % kRowsPerTile;
    s_weight[i] = r < rows ? ld_cluster_f32(cluster_map(s_part_lse + r, s)) : core::kNegInf;
  }
  __syncthreads();
  if (tid < rows) {
    float lse = core::kNegInf;
    for (int s = 0; s < splits; ++s) lse = core::merge_lse(lse, s_weight[s * kRowsPerTile + tid]);
    for (int s = 0; s < splits; ++s)
      s_weight[s * kRowsPerTile + tid] = split_weight(s_weight[s * kRowsPerTile + tid], lse);
    s_lse[tid] = lse;
  }
  __syncthreads();
  // This CTA's share of the rows x kCols4 output chunks: about 1 / splits of them, in order.
  const int total = rows * kCols4;
  const int share = (total + splits - 1) / splits;
  const int begin = cluster_rank() * share, end = min(total, begin + share);
  for (int idx = begin + tid; idx < end; idx += Cfg::kThreads) {
    const int r = idx / kCols4, col = (idx % kCols4) * 4;
    const float* local = s_part + r * Cfg::kHeadDim + col;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll kMaxClusterSplits
    for (int s = 0; s < splits; ++s) {
      const float w = s_weight[s * kRowsPerTile + r];
      const float4 v = ld_cluster_f32x4(cluster_map(local, s));
      acc[0] += w * v.x;
      acc[1] += w * v.y;
      acc[2] += w * v.z;
      acc[3] += w * v.w;
    }
    store_out<T>(p, batch, row_address(p, kv_head, row_first + r), col, acc, s_lse[r]);
  }
  cluster_sync();  // the other CTAs have read this one's shared memory
}

// What one CTA works on: its tile, its rows, and the block range of its split.
struct CtaWork {
  int split, kv_head, batch, tile, row_first, rows, len_k;
  core::MaskSpec mask;
  TilePlan plan;
  int block_begin, block_end;  // this split's blocks (empty past plan.splits)
};

// Reads cache_seqlens[batch] (through the limits), so before grid_dependency_wait() it is only a guess.
__device__ __forceinline__ CtaWork cta_work(const DecodeParams& p) {
  CtaWork w;
  w.split = blockIdx.x;
  w.kv_head = blockIdx.y / p.m_tiles;
  const int m_tile = blockIdx.y % p.m_tiles;
  w.batch = blockIdx.z;
  w.tile = (w.batch * p.heads_kv + w.kv_head) * p.m_tiles + m_tile;
  w.row_first = m_tile * kRowsPerTile;
  w.rows = min(kRowsPerTile, p.rows - w.row_first);
  w.len_k = p.limits.cached(p.cache_seqlens, w.batch) + p.seqlen_new;
  w.mask = core::MaskSpec::make(p.seqlen_q, w.len_k, p.causal, p.window_left, p.window_right);
  w.plan = plan_tile(p, w.mask, w.row_first, w.row_first + w.rows - 1);
  w.block_begin = w.plan.first_block + w.split * w.plan.blocks_per_split;
  w.block_end = min(w.plan.first_block + w.plan.blocks, w.block_begin + w.plan.blocks_per_split);
  return w;
}

// Before the wait for the kernel ahead on the stream (programmatic dependent launch): each warp asks L2 for the
// K and V rows of its first p.prefetch_blocks blocks, so that HBM works for this call while the previous one
// finishes (its merge, its last CTAs). Nothing read here feeds the result: the work and the page of each row
// come from cache_seqlens and the block table as they are now, which the kernel ahead may still be writing, so
// they are guesses, clamped into the caches (IndexLimits); the copies after the wait read everything again,
// and a line fetched early is still current, since every write lands in L2. A wrong guess costs only bandwidth.
template <typename Cfg, typename T>
__device__ __forceinline__ void prefetch_first_blocks(const DecodeParams& p) {
  const CtaWork w = cta_work(p);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  // Lanes 0-15 take the K row of key `lane` of each block, lanes 16-31 its V row.
  const bool is_v = lane >= kKeysPerBlock;
  const CacheParams& cache = is_v ? p.v_cache : p.k_cache;
  const T* base = static_cast<const T*>(cache.ptr) + w.kv_head * cache.head_stride;
  const int32_t* table = p.block_table != nullptr ? p.block_table + w.batch * p.block_table_row_stride : nullptr;
  constexpr int kLineBytes = 128;
  const int row_bytes = p.head_dim * kElemBytes;
  for (int j = 0; j < p.prefetch_blocks; ++j) {
    const int block = w.block_begin + warp + j * Cfg::kWarps;
    const int key = block * kKeysPerBlock + lane % kKeysPerBlock;
    if (block >= w.block_end || key >= w.len_k) break;
    const char* row =
        reinterpret_cast<const char*>(base + token_offset(cache, table, p.page_size, p.limits, w.batch, key));
    // Every 128-byte line the row touches (rows are 16-byte aligned, not line aligned).
    const uintptr_t end = reinterpret_cast<uintptr_t>(row) + row_bytes;
    for (uintptr_t a = reinterpret_cast<uintptr_t>(row) & ~uintptr_t(kLineBytes - 1); a < end; a += kLineBytes)
      prefetch_l2(reinterpret_cast<const void*>(a));
  }
}

// kClusterMerge: launched with the tile's splits as one cluster (merge_cluster); no workspace, no tickets.
template <typename Cfg, typename T, bool kClusterMerge>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm) decode_splitkv_kernel(const DecodeParams p) {
  constexpr int kStages = Cfg::kStages;
  // 128-byte aligned (swizzled_offset): declared with 16-byte alignment, the dynamic buffer began right after
  // the static s_last, 16 bytes off a 32-byte boundary, and every K/V row with it.
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* ring = sQ + Cfg::kQElems;  // [kWarps][kStages][K block, V block]
  __shared__ int s_last;        // this CTA is the tile's last to arrive
  // Launched with programmatic stream serialization on sm90 (decode_launch.cuh): the kernel before this one
  // on the stream (the append, a previous call, the caller's own work) may still be running. Nothing below
  // reads or writes global memory before it has completed; only L2 prefetches (guesses) come before.
  if (p.prefetch_blocks > 0) prefetch_first_blocks<Cfg, T>(p);
  grid_dependency_wait();

  const CtaWork work = cta_work(p);
  const int split = work.split, kv_head = work.kv_head, batch = work.batch, tile = work.tile;
  const int row_first = work.row_first, rows = work.rows, len_k = work.len_k;
  const core::MaskSpec mask = work.mask;
  const TilePlan plan = work.plan;
  // This tile needs fewer splits than the grid has (uniform per CTA). In a cluster every CTA takes part in
  // the merge: one past the tile's splits walks no block and offers rows that saw no key (weight 0).
  if (!kClusterMerge && split >= plan.splits) return;
  const int block_begin = work.block_begin, block_end = work.block_end;

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, t = lane % 4;

  // ---- the warp's K/V stream: blocks block_begin + warp + j * kWarps, j < count -------------------------
  const bool paged = p.block_table != nullptr;
  WarpKVLoader<Cfg, T> loader;
  {
    const int64_t k_seq = paged ? 0 : batch * p.k_cache.outer_stride;
    const int64_t v_seq = paged ? 0 : batch * p.v_cache.outer_stride;
    loader.k_base = static_cast<const T*>(p.k_cache.ptr) + k_seq + kv_head * p.k_cache.head_stride;
    loader.v_base = static_cast<const T*>(p.v_cache.ptr) + v_seq + kv_head * p.v_cache.head_stride;
    loader.table = paged ? p.block_table + batch * p.block_table_row_stride : nullptr;
    loader.lookups = reinterpret_cast<int32_t*>(smem_raw + Cfg::kLookupOffset) +
                     warp * Cfg::kLookupSlots * kKeysPerBlock;
    loader.k_outer = p.k_cache.outer_stride;
    loader.k_row = p.k_cache.row_stride;
    loader.v_outer = p.v_cache.outer_stride;
    loader.v_row = p.v_cache.row_stride;
    loader.len_k = len_k;
    loader.page_size = p.page_size;
    loader.limits = p.limits;
    loader.head_dim = p.head_dim;
    loader.row0 = lane / Cfg::kLanesPerRow;
    loader.col0 = (lane % Cfg::kLanesPerRow) * kChunkElems;
    loader.lane = lane;
    loader.swizzle_lane = (lane % kSwizzleChunks) ^ loader.row0;
  }
  const int first = block_begin + warp;
  const int count = first < block_end ? (block_end - first + Cfg::kWarps - 1) / Cfg::kWarps : 0;
  T* warp_ring = ring + warp * Cfg::kWarpRingElems;
  auto block_of = [&](int j) { return first + j * Cfg::kWarps; };
  auto stage_k = [&](int j) { return warp_ring + (j % kStages) * Cfg::kStageElems; };

  // Paged: the block-table entries of the first kLookupSlots blocks, waited for here (the first loads need
  // them); from then on each step fetches those of the block it will issue kStages - 1 steps later.
  if (paged) {
#pragma unroll
    for (int m = 0; m < Cfg::kLookupSlots; ++m)
      if (m < count) loader.fetch_lookups(m, block_of(m));
    cp_async_commit();
    cp_async_wait<0>();
    __syncwarp();  // every lane's entries are visible to the warp
  }
  // Loads first, so HBM is busy while Q is staged.
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < count) loader.issue(stage_k(j), stage_k(j) + Cfg::kBlockElems, j, block_of(j));
    cp_async_commit();  // one group per step, empty or not, so wait_group counts steps
  }

  // ---- Q: the tile's packed rows, zero past the last row and past head_dim -----------------------------
  for (int idx = tid; idx < kRowsPerTile * Cfg::kHeadDim; idx += Cfg::kThreads) {
    const int r = idx / Cfg::kHeadDim, c = idx % Cfg::kHeadDim;
    T v = from_float<T>(0.0f);
    if (r < rows && c < p.head_dim) {
      const RowAddress a = row_address(p, kv_head, row_first + r);
      v = static_cast<const T*>(p.q.ptr)[batch * p.q.batch_stride + a.query * p.q.row_stride + a.head * p.q.head_stride + c];
    }
    sQ[r * Cfg::kQStride + c] = v;
  }
  __syncthreads();

  WarpState<Cfg> st;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    st.row_max[half] = core::kNegInf;
    st.row_sum[half] = 0.0f;
    const int r = g + 8 * half;
    // Padding rows see no key; their results are never stored.
    st.key_lo[half] = 0;
    st.key_hi[half] = 0;
    if (r < rows) {
      const int query = (row_first + r) / p.group;
      st.key_lo[half] = int(mask.key_begin(query));
      st.key_hi[half] = int(mask.key_end(query));
    }
  }
#pragma unroll
  for (int dt = 0; dt < Cfg::kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) st.o[dt][e] = 0.0f;

  for (int j = 0; j < count; ++j) {
    cp_async_wait<kStages - 2>();
    // Makes every lane's copies of step j (and the block-table entries fetched with them) visible to the
    // warp, and proves every lane is done reading step j - 1's buffer and block j's lookup slot (read when
    // block j was issued, kStages - 1 steps ago), which the copies below overwrite.
    __syncwarp();
    const int ahead = j + kStages - 1;
    if (ahead < count) loader.issue(stage_k(ahead), stage_k(ahead) + Cfg::kBlockElems, ahead, block_of(ahead));
    // Paged: the entries of the block that step `ahead` will issue, into block j's slot.
    const int lookahead = ahead + kStages - 1;
    if (paged && lookahead < count) loader.fetch_lookups(lookahead, block_of(lookahead));
    cp_async_commit();
    attend_block<Cfg, T>(st, p, sQ, stage_k(j), stage_k(j) + Cfg::kBlockElems, lane, block_of(j) * kKeysPerBlock);
  }
  cp_async_wait<0>();
  // This CTA's loads are done: the next kernel on the stream may start launching into the SMs that the
  // CTAs leave from now on (it waits for this kernel's completion before it touches memory).
  grid_dependents_may_launch();

  // ---- merge the warps: the ring becomes fp32 [kWarps][kRowsPerTile][kHeadDim] plus row max / sum ------
  __syncthreads();  // every warp is done with its ring
  float* s_o = reinterpret_cast<float*>(ring);
  float* s_max = s_o + Cfg::kWarps * kRowsPerTile * Cfg::kHeadDim;
  float* s_sum = s_max + Cfg::kWarps * kRowsPerTile;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = quad_sum(st.row_sum[half]);
    const int r = g + 8 * half;
    if (t == 0) {
      s_max[warp * kRowsPerTile + r] = st.row_max[half];
      s_sum[warp * kRowsPerTile + r] = sum;
    }
#pragma unroll
    for (int dt = 0; dt < Cfg::kDTiles; ++dt) {
      float2* dst = reinterpret_cast<float2*>(s_o + (warp * kRowsPerTile + r) * Cfg::kHeadDim + dt * kMmaN + 2 * t);
      *dst = make_float2(st.o[dt][2 * half], st.o[dt][2 * half + 1]);
    }
  }
  __syncthreads();

  constexpr int kCols4 = Cfg::kHeadDim / 4;
  const bool direct = plan.splits == 1;
  float* s_part = s_sum + Cfg::kWarps * kRowsPerTile;  // cluster merge: [kRowsPerTile][kHeadDim], then LSEs
  float* s_part_lse = s_part + kRowsPerTile * Cfg::kHeadDim;
  static_assert(!kClusterMerge || Cfg::kCombineBytes + (kRowsPerTile * Cfg::kHeadDim + kRowsPerTile) * 4 <=
                                      Cfg::kRingBytes,
                "the cluster merge keeps the partial rows in the ring after the warps' buffers");
  const int64_t part_row0 = (int64_t(tile) * p.num_splits + split) * kRowsPerTile;
  for (int idx = tid; idx < rows * kCols4; idx += Cfg::kThreads) {
    const int r = idx / kCols4, col = (idx % kCols4) * 4;
    float m = core::kNegInf;
#pragma unroll
    for (int w = 0; w < Cfg::kWarps; ++w) m = fmaxf(m, s_max[w * kRowsPerTile + r]);
    const float base = m == core::kNegInf ? 0.0f : m;
    float sum = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int w = 0; w < Cfg::kWarps; ++w) {
      const float scale = fast_exp2(s_max[w * kRowsPerTile + r] - base);
      sum += s_sum[w * kRowsPerTile + r] * scale;
      const float4 v = *reinterpret_cast<const float4*>(s_o + (w * kRowsPerTile + r) * Cfg::kHeadDim + col);
      acc[0] += v.x * scale;
      acc[1] += v.y * scale;
      acc[2] += v.z * scale;
      acc[3] += v.w * scale;
    }
    // A row that saw no key keeps O = 0 and lse = -inf (as core::OnlineSoftmaxRow).
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const float lse = sum > 0.0f ? (m + log2f(sum)) * core::kLn2 : core::kNegInf;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] *= inv;
    if (kClusterMerge) {
      *reinterpret_cast<float4*>(s_part + r * Cfg::kHeadDim + col) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      if (col == 0) s_part_lse[r] = lse;
    } else if (direct) {
      store_out<T>(p, batch, row_address(p, kv_head, row_first + r), col, acc, lse);
    } else {
      *reinterpret_cast<float4*>(p.partial_o + (part_row0 + r) * Cfg::kHeadDim + col) =
          make_float4(acc[0], acc[1], acc[2], acc[3]);
      if (col == 0) p.partial_lse[part_row0 + r] = lse;
    }
  }
  if (kClusterMerge) {
    merge_cluster<Cfg, T>(p, s_part, s_part_lse, s_o, batch, kv_head, row_first, rows);
    return;
  }
  if (direct) return;

  // ---- the last CTA of the tile merges the splits ---------------------------------------------------------
  // The barrier orders every thread's partial rows before thread 0's ticket, whose release (acq_rel, gpu
  // scope) publishes them; the last split's acquire in the same atomic makes the other splits' rows visible,
  // and the second barrier orders every thread's reads after it.
  __syncthreads();
  if (tid == 0) s_last = atomic_add_acq_rel_gpu(p.tickets + tile, 1) == plan.splits - 1;
  __syncthreads();
  if (!s_last) return;
  // Zero at rest: the next kernel on this stream counts the tile's arrivals from 0 again.
  if (tid == 0) p.tickets[tile] = 0;
  merge_splits<Cfg, T>(p, s_o, tile, plan.splits, batch, kv_head, row_first, rows);
}

}  // namespace flashattn::cuda::decode
