// Tile geometry and kernel parameters of the split-KV decode kernels (Flash-Decoding, sm80+).
//
// One CTA owns one (batch, KV head, query-row tile, split). Its query rows are the packed GQA rows of the
// KV head: the group's query heads times the call's query tokens, kRowsPerTile of them per tile, so every
// K/V byte is read once per KV head (not once per query head). The split's keys are cut into blocks of
// kKeysPerBlock; warp w takes blocks w, w + kWarps, ... and streams them through its own cp.async ring of
// kStages buffers, so the warps never wait for each other inside the key loop. At the end the warps'
// softmax states are merged in shared memory.
#pragma once

#include <cstdint>

#include "cuda/common/problem_params.cuh"
#include "cuda/common/smem_swizzle.cuh"

namespace flashattn::cuda::decode {

constexpr int kWarpSize = 32;
constexpr int kRowsPerTile = 16;   // packed query rows per CTA: one mma.sync m16 tile
constexpr int kKeysPerBlock = 16;  // keys per warp step: one P V k-step of mma.sync.m16n8k16
constexpr int kMmaN = 8;
constexpr int kMmaK = 16;
constexpr int kChunkElems = 8;     // 16-bit elements per 16-byte cp.async chunk
constexpr int kElemBytes = 2;      // fp16 / bf16
constexpr int kQPadElems = 8;      // 16 bytes of padding per shared Q row: conflict-free ldmatrix phases
constexpr int kMaxSplits = 128;    // equals flashattn::kMaxKVSplits (static_assert in decode_fwd.cu)
// The most splits of one tile that merge inside one thread block cluster (sm90's non-portable cluster limit).
constexpr int kMaxClusterSplits = 16;
// K/V bytes each CTA keeps in flight at least: with one or two CTAs per SM, tens of KB per SM are what
// covers HBM latency at full bandwidth (Little's law: ~4 TB/s x ~1 us over 132 SMs).
constexpr int kMinBytesInFlight = 32 * 1024;
// K/V blocks per warp that a kernel launched behind another (programmatic dependent launch) asks L2 for
// before it may read memory, so that HBM streams this call's first blocks while the kernel ahead finishes
// (decode_kernel.cuh, prefetch_first_blocks). Measured on an H100 with decode calls back to back: 1 block
// saved 0.9-1.5 us a call on every benchmark shape, 2 and 4 no more, 8 (67 MB over the grid) lost 2-4%
// (docs/kvcache.md).
constexpr int kDecodePrefetchBlocks = 1;

// Per head dim: kWarps warps with kStages ring buffers each. Every warp keeps (kStages - 1) blocks of K
// and V in flight, kBytesInFlight per CTA; decode_hd*.cu pick the numbers per head dim so that an SM holds
// 64 KB or more of loads in flight (a memory-bound kernel needs tens of KB per SM to cover HBM latency).
template <int kHeadDim_, int kStages_, int kWarps_, int kMinBlocksPerSm_>
struct DecodeConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kStages = kStages_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr int kThreads = kWarps * kWarpSize;

  static constexpr int kQStride = kHeadDim + kQPadElems;  // elements between shared Q rows
  static constexpr int kQkSteps = kHeadDim / kMmaK;             // k-steps of Q K^T
  static constexpr int kDTiles = kHeadDim / kMmaN;              // n8 tiles of the O accumulator
  static constexpr int kChunksPerRow = kHeadDim / kChunkElems;

  // cp.async lane layout of one [kKeysPerBlock x kHeadDim] block: kLanesPerRow lanes share a row.
  static constexpr int kLanesPerRow = kChunksPerRow < kWarpSize ? kChunksPerRow : kWarpSize;
  static constexpr int kColIters = kChunksPerRow / kLanesPerRow;
  static constexpr int kRowsPerPass = kWarpSize / kLanesPerRow;
  static constexpr int kRowPasses = kKeysPerBlock / kRowsPerPass;

  // K and V rows are dense (kHeadDim elements) with their 16-byte chunks swizzled
  // (cuda/common/smem_swizzle.cuh); only Q keeps padded rows.
  static constexpr int kBlockElems = kKeysPerBlock * kHeadDim;  // one K (or V) block
  static constexpr int kStageElems = 2 * kBlockElems;              // K, then V
  static constexpr int kWarpRingElems = kStages * kStageElems;
  static constexpr int kQElems = kRowsPerTile * kQStride;
  static constexpr int kRingBytes = kWarps * kWarpRingElems * kElemBytes;
  static constexpr int kQBytes = kQElems * kElemBytes;
  // After the key loop the ring is reused for the warps' fp32 partial outputs and row statistics.
  static constexpr int kCombineBytes = (kWarps * kRowsPerTile * kHeadDim + 2 * kWarps * kRowsPerTile) * 4;
  // Paged caches: each warp's ring of block-table entries (one per key of a block), fetched 2 * (kStages - 1)
  // blocks ahead of use (WarpKVLoader), after the K/V ring or its combine buffer. 4 bytes an entry keep two
  // CTAs of the head-dim-64 kernel on one SM (2 x 113 KB).
  static constexpr int kLookupSlots = 2 * (kStages - 1);
  static constexpr int kLookupBytes = kWarps * kLookupSlots * kKeysPerBlock * 4;
  static constexpr int kLookupOffset = kQBytes + (kRingBytes > kCombineBytes ? kRingBytes : kCombineBytes);
  static constexpr int kSmemBytes = kLookupOffset + kLookupBytes;
  // K/V bytes (padding excluded) one CTA keeps in flight: kStages - 1 blocks of K and V per warp.
  static constexpr int kBytesInFlight = kWarps * (kStages - 1) * 2 * kKeysPerBlock * kHeadDim * kElemBytes;

  static_assert(kHeadDim % kMmaK == 0, "head_dim must be a multiple of the mma k depth (16)");
  static_assert(kDTiles % 2 == 0, "ldmatrix.x4.trans loads V fragments for two n8 tiles at a time");
  static_assert(kChunksPerRow % kLanesPerRow == 0, "the lanes of a row must cover it in whole passes");
  static_assert(kKeysPerBlock % kRowsPerPass == 0, "a block's rows must split evenly over the passes");
  static_assert(kKeysPerBlock <= kWarpSize, "each lane looks up the page of at most one key of a block");
  static_assert(kStages >= 2, "the ring needs one buffer to compute on and one in flight");
  static_assert(kBytesInFlight >= kMinBytesInFlight, "too few loads in flight per CTA to cover HBM latency");
  static_assert((kQStride * kElemBytes) % 16 == 0, "shared Q rows must stay 16-byte aligned");
  static_assert(kChunksPerRow % kSwizzleChunks == 0, "the swizzle permutes whole groups of 8 chunks");
  static_assert(kRowsPerPass <= kSwizzleChunks, "a copy pass's rows must differ in row % 8 (swizzled_offset)");
  static_assert(kQBytes % 32 == 0, "the ring after Q must start 32-byte aligned (swizzled_offset)");
};

// The ranges the kernels clamp what they read from the index tensors into. Checked indices
// (KVCacheArgs::check_indices, the default) lie inside already; trusted ones may not, and the clamp keeps
// every access inside the caches (a bad index then gives a wrong result, never a stray access).
struct IndexLimits {
  int max_cached;  // cache_seqlens[b] in [0, capacity - seqlen_new]
  int max_page;    // paged: block_table entries in [0, num_pages - 1]

  // (Plain comparisons: host-only files include this header too.) cache_seqlens nullptr: every cache is
  // full (a forward call of few query rows run as a KV-cache call, cuda::decode_takes_forward).
  __device__ __forceinline__ int cached(const int32_t* cache_seqlens, int b) const {
    if (cache_seqlens == nullptr) return max_cached;
    const int n = cache_seqlens[b];
    return n < 0 ? 0 : (n > max_cached ? max_cached : n);
  }
  __device__ __forceinline__ int page(int32_t entry) const {
    return entry < 0 ? 0 : (entry > max_page ? max_page : entry);
  }
};

// Element offset of token `pos` of sequence `b` in a cache (at its head 0, element 0): through the sequence's
// block-table row `table_row`, its entry read through the limits, or (table_row nullptr) in a contiguous
// cache, sequences outer_stride apart.
__device__ __forceinline__ int64_t token_offset(const CacheParams& c, const int32_t* table_row, int64_t page_size,
                                                const IndexLimits& limits, int64_t b, int64_t pos) {
  if (table_row != nullptr)
    return int64_t(limits.page(table_row[pos / page_size])) * c.outer_stride + (pos % page_size) * c.row_stride;
  return b * c.outer_stride + pos * c.row_stride;
}

// A plain-old-data view of one KV-cache call that the kernels take by value (strides in elements).
struct DecodeParams {
  TensorParams q, out;
  TensorParams lse;  // ptr nullptr: not requested; else [batch, heads_q, seqlen_q] fp32
  CacheParams k_cache, v_cache;
  const int32_t* cache_seqlens;  // device: cached tokens before the call (read through limits); nullptr: full
  const int32_t* block_table;    // device (entries read through limits); nullptr: contiguous cache
  int64_t block_table_row_stride;
  int page_size;
  IndexLimits limits;

  int batch, heads_kv, group, seqlen_q, seqlen_new, head_dim;
  int rows;     // packed rows per KV head: group * seqlen_q
  int m_tiles;  // query-row tiles per KV head: ceil(rows / kRowsPerTile)

  float scale_log2;     // softmax scale * log2(e): scores in log2 units
  float softcap_inner;  // scale / softcap (softcap on)
  float softcap_outer;  // softcap * log2(e); 0: softcap off
  bool causal;
  int window_left, window_right;  // -1: unbounded

  int num_splits;       // gridDim.x: the most splits any tile uses
  int min_split_keys;   // > 0: a tile uses at most (its keys / min_split_keys) splits (the heuristic)
  // Launched with programmatic dependent launch: each warp asks L2 for its first prefetch_blocks K/V blocks
  // before it waits for the kernel ahead of it (decode_kernel.cuh, prefetch_first_blocks); 0: none.
  int prefetch_blocks;

  // Workspace (only when num_splits > 1): per tile and split, kRowsPerTile partial rows of the kernel's
  // (padded) head dim in fp32 and their LSEs, and one arrival ticket per tile (zero at rest).
  float* partial_o;
  float* partial_lse;
  int* tickets;
};

}  // namespace flashattn::cuda::decode
