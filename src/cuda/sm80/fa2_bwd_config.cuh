// Tile shapes, warp grids and shared-memory layouts of the FA2 backward kernels (sm80+), and the
// workspace the passes share.
//
// Two kernels do the heavy work:
//   dK/dV kernel (KV-parallel, fa2_bwd_dkdv.cuh): a CTA owns kBlockN keys of one KV head and loops over the
//     query tiles (of every query head of its GQA group) that can see them; dK and dV stay in registers.
//     In the default mode it also adds dS K into an fp32 dQ accumulator with atomics.
//   dQ kernel (Q-parallel, fa2_bwd_dq.cuh): deterministic mode only; a CTA owns kBlockM query rows and loops
//     over the KV tiles in a fixed order, so dQ needs no atomics.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/candidate.h"

namespace flashattn::cuda::fa2_bwd {

// Shared-memory tiles of 16-bit elements are padded by 16 bytes per row: with a row stride of
// 2*cols + 16 bytes, the 8 row addresses of one ldmatrix 8x8 matrix fall in 8 different 16-byte bank
// groups for every column count used here (64..256), so ldmatrix and the fragment stores are
// conflict-free. An XOR swizzle would not cover 96 and 192 columns (not a power of two of chunks).
constexpr int kSmemPad = 8;  // elements
constexpr int kChunkElems = 8;  // 16-bit elements per 16-byte cp.async chunk
constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;
constexpr int kWarpSize = 32;

// Rows of the per-row workspaces (LSE in log2 units, D = rowsum(dO * O)) are padded to a multiple of
// this, so every query tile can load its rows with whole 16-byte copies and no bounds check: a multiple
// of every kernel's kBlockM (static_asserts below), or a tile past the end would read the next head's rows.
constexpr int kRowAlign = 128;

template <typename T>
constexpr const char* dtype_tag();
template <>
constexpr const char* dtype_tag<__half>() { return "fp16"; }
template <>
constexpr const char* dtype_tag<__nv_bfloat16>() { return "bf16"; }

// The KV-parallel dK/dV (+ atomic dQ) kernel.
// Measured on the H200 (d = 128, bf16, seqlen 8192, Nsight Compute, scripts/ncu_profile.sh): the kernel is
// latency-bound: dK/dV in registers cost 255 registers per thread, hence 1 CTA (8 warps, 2 per scheduler)
// per SM, and an instruction issues on 24% of the cycles (0.31 eligible warps per scheduler). With the
// per-tile addressing cut down (loads from per-thread 32-bit offsets, no division, one dQ base per tile)
// it executes 2.56 G warp instructions to 2.12 G of PyTorch's FA2 kernel with the same tiles and warp grids
// (sdpa_flash_bwd profile; 3.13 G before), in the same time: the tensor pipe is busy 38% of the cycles
// against their 48%. The stall samples spread over the phases of a tile (S, dP, dV, dK and dQ products
// 10-14% each; the dQ reductions and the register reuse that waits for them ~15%); all 8 warps are in the
// same phase at once, between barriers. The dQ atomics and the dQ product together are ~25% of the time
// (measured by leaving both out).
//
// Query rows per inner tile: 128 at d = 64 (measured 8% faster than 64 on the H200: half the barriers
// and per-tile overheads per key, and B fragments reused over twice the rows), 64 above, where S and dP of
// a 128-row tile would not fit next to dK/dV. The 128-row tile at d = 64 needs 182 KB of shared memory;
// where the device has less (163 KB on an A100) the launch takes the 64-row tile (with_dkdv_config).
constexpr int kSmallBlockM = 64;
constexpr int preferred_block_m(int head_dim) { return head_dim <= 64 ? 128 : kSmallBlockM; }

template <typename T_, int kHeadDim_, int kBlockM_ = preferred_block_m(kHeadDim_), bool kCandidate_ = false>
struct DkdvConfig {
  // The candidate form (cuda/common/candidate.h): built beside the shipped one with FLASHATTN_FA2_CANDIDATE=ON.
  static constexpr bool kCandidate = kCandidate_;
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per inner tile
  // 128 keys per CTA keeps dK and dV (2 * 128 * d fp32) at <= 128 registers per thread up to d = 128;
  // larger head dims halve the KV tile to stay spill-free.
  static constexpr int kBlockN = kHeadDim <= 128 ? 128 : 64;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * kWarpSize;
  // Query-side tiles (Q, dO, LSE, D) are double-buffered. Three stages at d = 64 (215 KB of shared memory,
  // two tiles' copies in flight behind the one computed on) were 0.2-0.4% faster in one process
  // (bench/results/h100-20261207-fa2-d64-three-stages-ab/, H100, 30 rounds): the copies already land in time.
  static constexpr int kStages = 2;
  // Every tile product is fully unrolled (warp_mma, where the measurements are).
  // Software-pipelined fragment loads in every product (warp_mma's kPrefetch):
  // measured 5% faster at d = 64 and 1.5% slower at d = 256. At d = 128 separate programs per tree read it
  // within their noise (1-2%), in a form that spilled on sm_80; timed in one process against the form
  // without (bench/results/h200-20261206-fa2-bwd-candidate-ab/, H200, 30 rounds) it is 2.0-2.4% faster
  // (N 2048 and 8192), and it fits in 251-254 registers without spills on sm_80 and sm_90a. At d = 256 the
  // same one-process timing confirmed the loss: 2.2-2.6% slower (bench/results/h100-20261207-fa2-d256-candidate-ab/,
  // H100).
  static constexpr bool kPrefetchFragments = kHeadDim <= 128;
  // Each CTA starts its walk over the query tiles at its own row block (its KV tile's index, modulo the
  // range) and wraps around, instead of every CTA of a head starting at the first. Measured on the H200
  // (bench/results/h200-20261203-fa2-bwd-rotated-walk/, backward sweep, 2 passes, spread <= 0.7%): 64-key
  // tiles (d = 256) 2.2% faster on all 12 shapes, causal and not; d = 128 0.9-1.4% slower, d = 64 +0.6%.
  // The d = 256 kernel compiles almost as before (2472 against 2440 SASS instructions, the same products
  // and loads), and the causal CTAs, which start on different rows anyway, gained as much as the others:
  // the cause is not known. d = 64 was left out on that sweep's +0.6%; timed in one process against the
  // walk from the first row block (bench/results/h200-20261206-fa2-bwd-candidate-ab/, H200, 30 rounds) it is
  // 2.3-2.8% faster (N 2048 and 8192, N 2048 causal), so it takes the rotation too.
  // d = 192 shares the 64-key tile and takes the rotation too; it was not timed.
  static constexpr bool kRotatedWalk = kBlockN == 64 || kHeadDim == 64;
  // The next query tile's copies go out behind this tile's S product instead of right after the loop-top
  // barrier, so that every warp leaves the barrier straight into mma.sync. Measured on the H200
  // (bench/results/h200-20261203-fa2-bwd-sass-vs-pytorch/, backward sweep, 2 passes): d 64 +1.4..+3.1% on
  // all 12 shapes, d 128 +0.2% alone and +5.3..+9.2% with the full unroll, d 256 -1.0..-2.0% on all 12. So
  // the 64-key tiles (d 192 and 256, d 192 not timed) keep the copies at the loop top.
  static constexpr bool kLoadsAfterS = kBlockN != 64;

  // Warp grids of the three products. Each names how many warps split the rows; the others split the
  // columns. Square-ish warp tiles (32 x 32, 32 x 64) read the fewest operand bytes from shared memory per
  // mma, which is what bounds this kernel. dQ at d <= 96 takes four warps along the rows: 96 columns cannot
  // split in four 16-column pairs, and at d = 64 the 32 x 32 warp tile reads 32 fragments per warp and tile
  // where 64 x 16 read 40 (with the one-pass dP below, d 64 measured 2.4-5.5% faster on the H200:
  // bench/results/h200-20261203-fa2-bwd-d64-unroll/).
  // S = Q K^T and dP = dO V^T (kBlockM x kBlockN).
  static constexpr int kSWarpsM = 2;
  static constexpr int kSWarpsN = kWarps / kSWarpsM;
  static constexpr int kSRowTiles = kBlockM / kSWarpsM / kMmaM;
  static constexpr int kSColTiles = kBlockN / kSWarpsN / kMmaN;
  // dV = P^T dO and dK = dS^T Q (kBlockN x kHeadDim).
  static constexpr int kKvWarpsN = kBlockN == 128 ? 4 : 2;
  static constexpr int kKvWarpsD = kWarps / kKvWarpsN;
  static constexpr int kKvRowTiles = kBlockN / kKvWarpsN / kMmaM;
  static constexpr int kKvColTiles = kHeadDim / kKvWarpsD / kMmaN;
  // dQ = dS K (kBlockM x kHeadDim).
  static constexpr int kQWarpsM = kHeadDim <= 96 ? 4 : 2;
  static constexpr int kQWarpsD = kWarps / kQWarpsM;
  static constexpr int kQRowTiles = kBlockM / kQWarpsM / kMmaM;
  static constexpr int kQColTiles = kHeadDim / kQWarpsD / kMmaN;

  // Accumulators live at once: dK + dV always, S (as P * softcap') + dP in the second product of a tile,
  // dQ in the last. Above kTileRegBudget next to dK/dV, dP or dQ is formed in two column passes (each
  // pass reloads its A fragments) so the kernel stays spill-free.
  // 192 at d = 128: dP in one pass (254 registers, no spills) measured 5% faster on the H200 than two
  // passes. d = 64 (128-row tile) spilled at 192 in an earlier form of this kernel; the current one fits
  // (244-247 registers, no spills on sm_80 and sm_90a) and forms dP in one pass as well. d 256 with dQ in
  // one pass (192 there) measured 2.6-3.8% slower, so it keeps 160.
  static constexpr int kTileRegBudget = kHeadDim <= 128 ? 192 : 160;
  static constexpr int kDkdvRegs = 2 * kKvRowTiles * kKvColTiles * 4;
  static constexpr int kSRegs = kSRowTiles * kSColTiles * 4;
  static constexpr int kQRegs = kQRowTiles * kQColTiles * 4;
  static constexpr int kDpPasses = kDkdvRegs + 2 * kSRegs > kTileRegBudget && kSColTiles % 4 == 0 ? 2 : 1;
  static constexpr int kQPasses = kDkdvRegs + kQRegs > kTileRegBudget && kQColTiles % 4 == 0 ? 2 : 1;
  // P and dS go to shared memory by stmatrix on sm90 (store_tile_pair). Measured on the H200
  // (bench/results/h200-20261203-fa2-bwd-dq-blocks/, against 4-byte stores): head dim 64 +2.1..+3.5%, 128
  // +0.3..+1.0%, 256 -1.1..-2.4%. Head dims up to 128.
  static constexpr bool kStoreMatrix = kHeadDim <= 128;

  static_assert(kHeadDim % 32 == 0, "head_dim must be a multiple of 32 (whole 16-byte chunks per thread)");
  static_assert(kSRowTiles * kSWarpsM * kMmaM == kBlockM && kSColTiles * kSWarpsN * kMmaN == kBlockN &&
                    kSColTiles % 2 == 0,
                "S warp grid must tile kBlockM x kBlockN in 16-column pairs");
  static_assert(kKvRowTiles * kKvWarpsN * kMmaM == kBlockN && kKvColTiles * kKvWarpsD * kMmaN == kHeadDim &&
                    kKvColTiles % 2 == 0,
                "dK/dV warp grid must tile kBlockN x kHeadDim in 16-column pairs");
  static_assert(kQRowTiles * kQWarpsM * kMmaM == kBlockM && kQColTiles * kQWarpsD * kMmaN == kHeadDim &&
                    kQColTiles % 2 == 0,
                "dQ warp grid must tile kBlockM x kHeadDim in 16-column pairs");
  static_assert((kBlockM * kHeadDim / kChunkElems) % kThreads == 0, "Q/dO tiles must split evenly over threads");
  static_assert((kBlockN * kHeadDim / kChunkElems) % kThreads == 0, "K/V tiles must split evenly over threads");
  static_assert(kRowAlign % kBlockM == 0, "row padding must cover whole tiles");

  static constexpr int kStrideD = kHeadDim + kSmemPad;  // row stride of Q, dO, K, V tiles (elements)
  static constexpr int kStrideN = kBlockN + kSmemPad;   // row stride of P, dS tiles
  static constexpr int kKvTileBytes = kBlockN * kStrideD * 2;
  static constexpr int kQTileBytes = kBlockM * kStrideD * 2;
  static constexpr int kPTileBytes = kBlockM * kStrideN * 2;
  static constexpr int kRowVecBytes = kBlockM * 4;
  // Byte offsets into dynamic shared memory; every one is a multiple of 16.
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKvTileBytes;
  static constexpr int kOffQ = kOffV + kKvTileBytes;
  static constexpr int kOffDo = kOffQ + kStages * kQTileBytes;
  static constexpr int kOffP = kOffDo + kStages * kQTileBytes;
  static constexpr int kOffDs = kOffP + kPTileBytes;
  static constexpr int kOffLse = kOffDs + kPTileBytes;
  static constexpr int kOffDelta = kOffLse + kStages * kRowVecBytes;
  static constexpr int kSmemBytes = kOffDelta + kStages * kRowVecBytes;
  static_assert(kKvTileBytes % 16 == 0 && kQTileBytes % 16 == 0 && kPTileBytes % 16 == 0, "16-byte alignment");
};

// Calls fn(Cfg{}) with the dK/dV configuration to run on a device that allows smem_optin bytes of shared
// memory per block: the preferred one, or the 64-row tile where the preferred one does not fit; its
// candidate form where the build has one and the call asks for it (fa2_candidate_requested).
template <typename T, int D, bool kCandidate, class Fn>
auto with_dkdv_form(size_t smem_optin, Fn&& fn) {
  using Preferred = DkdvConfig<T, D, preferred_block_m(D), kCandidate>;
  if constexpr (Preferred::kBlockM != kSmallBlockM) {
    if (size_t(Preferred::kSmemBytes) > smem_optin) return fn(DkdvConfig<T, D, kSmallBlockM, kCandidate>{});
  }
  return fn(Preferred{});
}
template <typename T, int D, class Fn>
auto with_dkdv_config(size_t smem_optin, Fn&& fn) {
#if defined(FLASHATTN_FA2_CANDIDATE)
  if (fa2_candidate_requested()) return with_dkdv_form<T, D, true>(smem_optin, fn);
#endif
  return with_dkdv_form<T, D, false>(smem_optin, fn);
}

// The Q-parallel dQ kernel of deterministic mode: FA2-forward-like, each warp owns 16 query rows, so
// P and dS never leave registers.
template <typename T_, int kHeadDim_>
struct DqConfig {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = kHeadDim <= 128 ? 64 : 32;  // keeps S, dP and dQ spill-free at d = 256
  static constexpr int kWarps = kBlockM / kMmaM;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kStages = 2;  // K/V tiles are double-buffered
  static constexpr int kSTiles = kBlockN / kMmaN;
  static constexpr int kQTiles = kHeadDim / kMmaN;
  // k-steps of S = Q K^T / dP = dO V^T unrolled at once. The full unroll hoists the fragment loads of
  // every step next to the dQ accumulators and spills at d = 128, 192 and 256; two steps remove those
  // spills (the d = 256 softcap kernel kept 16 bytes of spill on sm_90a until its K/V loads moved to
  // fa2::TileLoader's per-thread offsets).
  static constexpr int kUnrollQk = 2;
  static_assert(kSTiles % 2 == 0 && kQTiles % 2 == 0, "fragment loads cover pairs of 8-column tiles");
  static_assert((kBlockM * kHeadDim / kChunkElems) % kThreads == 0, "Q/dO tiles must split evenly over threads");
  static_assert((kBlockN * kHeadDim / kChunkElems) % kThreads == 0, "K/V tiles must split evenly over threads");
  static_assert(kRowAlign % kBlockM == 0, "row padding must cover whole tiles");

  static constexpr int kStrideD = kHeadDim + kSmemPad;
  static constexpr int kQTileBytes = kBlockM * kStrideD * 2;
  static constexpr int kKvTileBytes = kBlockN * kStrideD * 2;
  static constexpr int kOffQ = 0;
  static constexpr int kOffDo = kOffQ + kQTileBytes;
  static constexpr int kOffK = kOffDo + kQTileBytes;
  static constexpr int kOffV = kOffK + kStages * kKvTileBytes;
  static constexpr int kSmemBytes = kOffV + kStages * kKvTileBytes;
};

// Device buffers shared by the passes of one backward call (allocated stream-ordered per call).
struct Workspace {
  float* dq_accum = nullptr;  // fp32 in 16 x 8 fragment tiles (accum_row0); nullptr in deterministic mode
  float* lse_log2 = nullptr;  // [batch, heads_q, rows_pad]: LSE * log2(e); +inf where P must be 0
  float* delta = nullptr;     // [batch, heads_q, rows_pad]: D = rowsum(dO * O); 0 on padding rows
  int rows_pad = 0;           // seqlen_q rounded up to kRowAlign
};

}  // namespace flashattn::cuda::fa2_bwd
