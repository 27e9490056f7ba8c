// Tile geometry and shared-memory movement of the FA2 kernels (sm80+).
//
// Shared-memory tiles hold rows of head_dim 16-bit elements in one of two layouts (SmemRows). Padded: each
// row padded by 16 bytes, which shifts consecutive rows by four banks, so the eight 16-byte row segments one
// ldmatrix phase reads (eight consecutive rows, same columns) fall into eight distinct bank groups; it works
// for every head dim (96 has 12 chunks per row, which an XOR swizzle over groups of 8 would not cover).
// Swizzled: dense rows whose 16-byte chunks are permuted within each group of eight by the row's low three
// bits (cuda/common/smem_swizzle.cuh, shared with the decode kernels), which spreads the same eight segments
// over the bank groups and keeps every 32-byte piece of a row on a 32-byte boundary, so cp.async copies ask
// L2 for no more sectors than they need. Forward kernels choose per head dim (FwdConfig, fa2_fwd.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "cuda/common/ptx_sm80.cuh"
#include "cuda/common/smem_swizzle.cuh"

namespace flashattn::cuda::fa2 {

constexpr int kWarpSize = 32;
constexpr int kMmaM = 16;       // rows of one mma.sync.m16n8k16 tile
constexpr int kMmaN = 8;        // columns of its accumulator
constexpr int kMmaK = 16;       // reduction depth
constexpr int kChunkElems = 8;  // 16-bit elements in one 16-byte cp.async / ldmatrix row segment
constexpr int kChunkBytes = 16;
constexpr int kElemBytes = 2;  // fp16 / bf16
constexpr int kSmemPadElems = 8;  // 16 bytes of padding per shared-memory row (see the file comment)

// One layout of shared-memory rows of kCols 16-bit elements (see the file comment): chunk c of row r sits at
// chunk (c & ~7) | ((c ^ r) & 7) of a dense row when kSwizzled, at chunk c of a padded row otherwise.
template <int kCols, bool kSwizzled_>
struct SmemRows {
  static constexpr bool kSwizzled = kSwizzled_;
  static constexpr int kStride = kSwizzled ? kCols : kCols + kSmemPadElems;  // elements between rows
  static_assert(!kSwizzled || (kCols / kChunkElems) % kSwizzleChunks == 0,
                "swizzled rows permute whole groups of 8 chunks");

  // Element offset of chunk `chunk` of row `row`.
  __device__ __forceinline__ static int offset(int row, int chunk) {
    if constexpr (kSwizzled)
      return swizzled_chunk_offset<kCols>(row, chunk);
    else
      return row * kStride + chunk * kChunkElems;
  }
};

// One lane's ldmatrix addresses in a tile of Rows: the lane reads row row_base + lane_row at chunk
// chunk_base + lane_chunk, where row_base is a multiple of 8 and chunk_base's low three bits are disjoint
// from lane_chunk's (both compile-time constants in the unrolled loops). On swizzled rows the row's low
// bits are then lane_row's, and the permuted chunk's low bits are lane_off's XOR chunk_base's: one
// loop-invariant register per lane and an immediate (a swizzled row's stride is a multiple of 64
// elements, so the XOR touches only the chunk bits of lane_off). Padded rows keep the plain sum.
template <typename Rows>
struct LaneRows {
  int lane_row, lane_col;  // padded rows
  int lane_off;            // swizzled rows

  __device__ __forceinline__ LaneRows(int row, int chunk)
      : lane_row(row),
        lane_col(chunk * kChunkElems),
        lane_off(row * Rows::kStride + ((chunk ^ row) & (kSwizzleChunks - 1)) * kChunkElems) {}

  __device__ __forceinline__ int at(int row_base, int chunk_base) const {
    if constexpr (Rows::kSwizzled)
      return row_base * Rows::kStride + (chunk_base & ~(kSwizzleChunks - 1)) * kChunkElems +
             (lane_off ^ ((chunk_base & (kSwizzleChunks - 1)) * kChunkElems));
    else
      return (row_base + lane_row) * Rows::kStride + chunk_base * kChunkElems + lane_col;
  }
};

// Tile sizes of one forward kernel. A CTA owns kBlockM query rows; warp w owns the kRowsPerWarp rows
// starting at w * kRowsPerWarp, in kMTiles slices of 16 (sliced-Q: no cross-warp reduction).
// K/V tiles of kBlockN keys: with kStages 2 both are double-buffered (the next block's K and V load during
// the whole of this block); with kStages 1 there is one K and one V buffer and the loads interleave with
// the GEMMs (V of block n loads under Q K^T of block n, K of block n - 1 under the softmax and P V of
// block n), which halves the K/V shared memory so that two CTAs fit on an SM where double buffers would
// allow only one.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kMinBlocksPerSm_, int kStages_ = 2,
          bool kSwizzleKv_ = false, bool kCandidate_ = false>
struct FwdConfig {
  // The candidate form (cuda/common/candidate.h): built beside the shipped one with FLASHATTN_FA2_CANDIDATE=ON.
  static constexpr bool kCandidate = kCandidate_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;  // __launch_bounds__ occupancy target
  static constexpr int kStages = kStages_;                   // K/V buffers (see above)
  // The softmax scale folded into the exponent's FFMA (fa2_fwd_kernel.cuh, to_log2_minus). Measured on the
  // H200 (bench/results/h200-20261202-shortn-ab/): head dim 64 1-4.5% faster, 256 1% slower. At 128 that
  // form spilled while the kernel carried the softcap code; without it (the kSoftcap template) it fits in
  // 255 registers and measured 0-3.7% faster (bench/results/h200-20261203-fa2-fwd-fold128/). Head dims up
  // to 128: at 256 it measured 0.2-0.7% slower again, timed in one process against the form without
  // (bench/results/h100-20261207-fa2-d256-fold-ab/, H100).
  static constexpr bool kFoldScale = kHeadDim_ <= 128;
  // FA4's conditional rescale (fa2_fwd_kernel.cuh). Measured on the H200
  // (bench/results/h200-20261203-fa2-fwd-cond-rescale/): head dim 64 -0.6..+5.1%, 128 +2.3..+6.0%, 256
  // -3.4..+0.7% (slower on every non-causal shape). Head dims up to 128; above, every block rescales.
  static constexpr bool kConditionalRescale = kHeadDim_ <= 128;
  // The skewed KV loop (fa2_fwd_kernel.cuh, skew_block): P V of block n + 1 issued beside the exponentials of
  // block n. It holds one more P (kMTiles * kNTiles * 2 registers) across the loop, which fits at head
  // dim 64 (two 16-row slices per warp, double buffers); at 96 and 128 it would spill. Measured on the H200
  // (bench/results/h200-20261203-fa2-fwd-skewed-pv/): head dim 64 +1.0..+2.6% from N 1024 (-3.4% at N 512
  // causal); a single-buffered form at head dim 256 lost 1.0..4.3% on every shape and was not kept.
  static constexpr bool kSkewPv = kHeadDim_ <= 64 && kStages_ == 2;

  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / kMmaM;   // 16-row slices per warp
  static constexpr int kNTiles = kBlockN / kMmaN;        // accumulator tiles of S per slice
  static constexpr int kDTiles = kHeadDim / kMmaN;       // accumulator tiles of O per slice
  static constexpr int kQkSteps = kHeadDim / kMmaK;      // k-steps of Q K^T
  static constexpr int kPvSteps = kBlockN / kMmaK;       // k-steps of P V
  // Q (and O in the epilogue) in padded rows: Q is copied once per CTA, and its fragments then need no
  // per-lane chunk arithmetic. K and V, copied for every block, in swizzled rows with kSwizzleKv_.
  using QRows = SmemRows<kHeadDim, false>;
  using KvRows = SmemRows<kHeadDim, kSwizzleKv_>;
  static constexpr int kQStride = QRows::kStride;    // elements between shared Q rows
  static constexpr int kKvStride = KvRows::kStride;  // elements between shared K (V) rows
  static constexpr int kChunksPerRow = kHeadDim / kChunkElems;

  static constexpr int kQElems = kBlockM * kQStride;
  static constexpr int kKvElems = kBlockN * kKvStride;  // one K (or V) buffer
  static constexpr int kSmemBytes = (kQElems + 2 * kStages * kKvElems) * kElemBytes;  // Q, K and V

  static_assert(kStages == 1 || kStages == 2, "single or double K/V buffers");
  static_assert(kHeadDim % kMmaK == 0, "head_dim must be a multiple of the mma k depth (16)");
  static_assert(kBlockM % kWarps == 0 && kRowsPerWarp % kMmaM == 0,
                "each warp must own whole 16-row slices of the Q tile");
  static_assert(kBlockN % kMmaK == 0, "kBlockN must be a multiple of 16 (P V k-steps)");
  static_assert(kNTiles % 2 == 0 && kDTiles % 2 == 0, "ldmatrix.x4 loads fragments for two n8 tiles at a time");
  static_assert((kRowsPerWarp * kChunksPerRow) % kWarpSize == 0, "the epilogue splits a warp's rows over lanes");
  static_assert((kQStride * kElemBytes) % kChunkBytes == 0 && (kKvStride * kElemBytes) % kChunkBytes == 0,
                "shared rows must stay 16-byte aligned for cp.async");
  static_assert((kQElems * kElemBytes) % 32 == 0 && (kKvElems * kElemBytes) % 32 == 0,
                "every tile must start 32-byte aligned (see the file comment)");
};

// The candidate form of a forward configuration (FwdConfig::kCandidate).
template <typename Cfg>
struct FwdCandidateOf;
template <int D, int M, int N, int W, int B, int S, bool kSwizzle>
struct FwdCandidateOf<FwdConfig<D, M, N, W, B, S, kSwizzle, false>> {
  using type = FwdConfig<D, M, N, W, B, S, kSwizzle, true>;
};

// The largest power of two that divides n, capped at `cap` (a power of two): threads that share one
// tile row.
constexpr int pow2_divisor(int n, int cap = kWarpSize) {
  return (n % 2 != 0 || cap == 1) ? 1 : 2 * pow2_divisor(n / 2, cap / 2);
}

// The pointer as it is; with kOpaque, opaque to the optimizer. A tile's first row formed once this way keeps
// TileLoader's chunk addresses at one wide multiply-add each (the tile pointer plus the chunk's 32-bit
// offset); seen through, the arithmetic that formed the tile pointer (a 64-bit row offset) was folded
// into every chunk's address.
template <bool kOpaque, typename T>
__device__ __forceinline__ const T* block_pointer(const T* ptr) {
  if constexpr (kOpaque) asm("" : "+l"(ptr));
  return ptr;
}

// TileLoader's offsets inside one tile are 32-bit: tiles have at most kMaxTileRows rows, and the hosts
// refuse row strides above kMaxTileRowStride elements (kMaxTileRows * row_stride < 2^31).
constexpr int kMaxTileRows = 128;
constexpr int64_t kMaxTileRowStride = int64_t(INT_MAX) / kMaxTileRows;

// Copies a [kRows x kCols] tile of 16-bit elements from global to shared memory with 16-byte cp.async,
// into rows kSmemStride elements apart, padded, or swizzled (SmemRows; kSmemStride == kCols).
// Rows >= valid_rows and columns >= head_dim (a head dim padded up to the kernel's) are zero-filled
// without reading global memory: stale shared data could hold NaN, and 0 * NaN is NaN.
//
// Each thread keeps one column set and one first row for every tile it ever loads (the other chunks
// are at compile-time offsets), so the per-thread addressing state that stays live across the KV loop
// is a few registers instead of one address per chunk.
template <int kRows, int kCols, int kSmemStride, int kThreads, bool kSwizzled = false>
struct TileLoader {
  static_assert(kRows <= kMaxTileRows, "the hosts' row-stride limit assumes tiles of at most kMaxTileRows rows");
  static constexpr int kChunksPerRow = kCols / kChunkElems;
  static constexpr int kThreadsPerRow = pow2_divisor(kChunksPerRow);
  static constexpr int kColIters = kChunksPerRow / kThreadsPerRow;
  static constexpr int kRowsPerPass = kThreads / kThreadsPerRow;
  static constexpr int kRowIters = kRows / kRowsPerPass;
  static_assert(kThreads % kThreadsPerRow == 0, "threads must cover whole rows");
  static_assert(kRows % kRowsPerPass == 0, "tile rows must split evenly over the CTA's threads");
  // Swizzled: a thread's chunks are kThreadsPerRow apart (a multiple of 8: the permuted low bits stay the
  // thread's own), and its rows kRowsPerPass apart (a power of two: below 8, row0 < kRowsPerPass, so row
  // row0 + i * kRowsPerPass has the low bits row0 ^ (i * kRowsPerPass % 8)).
  static_assert(!kSwizzled || (kSmemStride == kCols && kThreadsPerRow % kSwizzleChunks == 0 &&
                               (kRowsPerPass & (kRowsPerPass - 1)) == 0),
                "swizzled tiles: dense rows, whole chunk groups per thread, a power-of-two row step");

  int row0;  // first row of this thread
  int col0;  // first column (elements) of this thread

  __device__ __forceinline__ explicit TileLoader(int tid)
      : row0(tid / kThreadsPerRow), col0((tid % kThreadsPerRow) * kChunkElems) {}

  // Shared offset (elements) of the thread's first chunk; swizzled, pass i XORs it with
  // (i * kRowsPerPass % 8) * 8. Formed per call rather than kept, so that the loader's state across the KV
  // loop stays two registers.
  __device__ __forceinline__ int first_offset() const {
    if constexpr (kSwizzled)
      return SmemRows<kCols, true>::offset(row0, col0 / kChunkElems);
    else
      return row0 * kSmemStride + col0;
  }

  // row_stride <= kMaxTileRowStride (checked on the host): offsets inside one tile are 32-bit, which keeps
  // the addressing state small. Each chunk's address is formed anew from its offset: a row pointer stepped
  // by one 64-bit add per row executed 16% fewer instructions at head dim 256 but ran the forward 3.5%
  // slower, and so did the copies spread over the Q K^T k-steps (docs/performance.md).
  template <typename T>
  __device__ __forceinline__ void load(T* smem, const T* gmem, int row_stride, int valid_rows,
                                       int head_dim) const {
    const int src_row = row0 * row_stride + col0;
    const int dst0 = first_offset();
#pragma unroll
    for (int i = 0; i < kRowIters; ++i) {
      const bool row_ok = row0 + i * kRowsPerPass < valid_rows;
      const int dst_row = (kSwizzled ? dst0 ^ ((i * kRowsPerPass) % kSwizzleChunks * kChunkElems) : dst0) +
                          i * kRowsPerPass * kSmemStride;
#pragma unroll
      for (int j = 0; j < kColIters; ++j) {
        const int col = j * kThreadsPerRow * kChunkElems;
        const bool valid = row_ok && col0 + col < head_dim;
        // With valid false the copy reads nothing (src-size 0), so the address may lie past the tensor.
        const int src = src_row + i * kRowsPerPass * row_stride + col;
        cp_async_16(smem + dst_row + col, gmem + src, valid);
      }
    }
  }
};

}  // namespace flashattn::cuda::fa2
