// Tile shapes, shared-memory layout and kernel parameters of the fa3 forward (sm90a).
//
// A CTA owns a Q tile of kBlockM rows, split between two or three consumer warpgroups of 64 rows each (one
// wgmma M). A producer warpgroup feeds them through a ring of kStages K and V buffers. Every tile in
// shared memory is stored the way TMA writes it with SWIZZLE_128B: the head dim in column blocks of 64
// 16-bit elements (128 bytes); inside a block, row i occupies 128 bytes with its 16-byte chunk c at
// position c ^ (i % 8); blocks follow each other after all rows of the previous one.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/problem_params.cuh"
#include "cuda/sm90/sm90_ptx.cuh"

namespace flashattn::cuda::fa3 {

template <int kHeadDim_, int kConsumerWarpgroups_, int kBlockN_, int kStages_, bool kWarpSpecialized_,
          bool kPingPong_, bool kIntraOverlap_, bool kAblation_ = false, bool kPartialCols_ = false,
          bool kPackGqa_ = false, bool kSoftcap_ = true, bool kCandidate_ = false>
struct Fa3Config {
  static constexpr int kHeadDim = kHeadDim_;
  // Each consumer warpgroup owns 64 rows (one wgmma M) of the Q tile.
  static constexpr int kConsumerWarpgroups = kConsumerWarpgroups_;
  static constexpr int kBlockM = 64 * kConsumerWarpgroups;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // Overlap switches (the ablation benchmark turns each off; the shipped kernels have all on but ping-pong
  // at head dim 64 on 128-row tiles, fa3_ping_pong in fa3_launch.cuh).
  static constexpr bool kWarpSpecialized = kWarpSpecialized_;  // producer warpgroup issues the TMA loads
  static constexpr bool kPingPong = kPingPong_ && kWarpSpecialized_;  // consumers take turns issuing GEMMs
  static constexpr bool kIntraOverlap = kIntraOverlap_;  // softmax of block j runs under P V of block j-1
  // One of the ablation's variants (flashattn bench --ablation): the pipeline as measured there.
  static constexpr bool kAblation = kAblation_;
  // The problem's head dim (a multiple of 8) is below kHeadDim: TMA fills the columns past it with zeros
  // when it loads Q, K and V (out of the tensor maps' bounds), so S is exact and those columns of O are 0;
  // the epilogue stores only the problem's columns. Compiled apart so the full-width kernels stay as they are.
  static constexpr bool kPartialCols = kPartialCols_;
  // GQA packing: a tile's rows are (query token, query head) pairs of one KV head, token-major: tile row r
  // of the pair (batch, kv head) is token r / G and query head kv_head * G + r % G (G = heads_q / heads_kv,
  // Fa3Params::pack_group), so one tile of few tokens fills its rows from the G heads that share its K and
  // V. Q loads through a 5-d tensor map (head dim, G, KV heads, tokens, batch); the mask goes by token.
  static constexpr bool kPackGqa = kPackGqa_;
  // The softcap's tanh in the kernel, applied where the problem has one (a branch per block); without it the
  // kernel has no softcap code at all, and the launch takes such a kernel for every problem without a softcap
  // (launch_full). The tanh loop, ~17 instructions per score in every softmax of the kernel, was more than
  // half of each kernel's code; compiled out, the kernels without it ran faster though they never took that
  // branch: in one process on an H100 against the kernels with it (30 rounds of 10 calls,
  // bench/results/h100-20261207-fa3-no-softcap-code-ab/), d 128 +0.7..+1.6% (N 512 to 8192, causal N 8192),
  // d 64 +1.6..+4.9% (causal N 512 and 1024 on 128-row tiles the most), d 256 +0.0..+0.4%. The ablation's
  // variants keep the softcap code, as measured there.
  static constexpr bool kSoftcap = kSoftcap_;
  // The candidate form of a full kernel: a change under test is written as code that only this form takes
  // (if constexpr (Cfg::kCandidate)), and a build with FLASHATTN_FA3_CANDIDATE=ON compiles both forms, picked
  // per call by the environment (fa3_candidate_requested), so that one process can time them in alternation
  // (bench/candidate_ab.py). The shipped code has no such paths: both forms are then the same kernel.
  static constexpr bool kCandidate = kCandidate_;

  // Q buffers: two where shared memory allows (head dims 64 and 128 of the shipped kernels), so that the next
  // tile's Q loads while this tile runs and its first Q K^T can be issued before this tile's epilogue, which
  // then runs under it (Consumer::run). Head dim 256 (a second 64 KB Q does not fit) and the ablation
  // variants keep one buffer and the epilogue right after the last P V.
  static constexpr int kQBuffers = kWarpSpecialized && kIntraOverlap && !kAblation && kHeadDim != 256 ? 2 : 1;
  static constexpr bool kDeferEpilogue = kQBuffers == 2;
  // A consumer warpgroup whose 64 rows of a tile all lie past the end of the sequence (the last tile of a
  // length that is not a multiple of kBlockM) issues no GEMMs for it: it keeps pace with the K/V ring and
  // the ping-pong turns only (Consumer::idle_tile). Only on three consumers (192-row tiles, where whole
  // padded warpgroups are common: 1024 rows end in a tile of 64); on two, compiling it in slowed kernels
  // that never take it (bench/results/h100-20261205-fa3-idle-rows/). Not in the ablation's variants, so
  // always with intra-warpgroup overlap (Consumer::idle_blocks assumes it).
  static constexpr bool kIdleRows = kWarpSpecialized && kIntraOverlap && !kAblation && kConsumerWarpgroups == 3;

  static constexpr int kRowsPerWarpgroup = kBlockM / kConsumerWarpgroups;  // one wgmma M (64)
  // A main-loop block's softmax first tries the exponentials against the rows' stored max, with no block max
  // (softmax_rows_stale); a warp for which that does not hold waits for P V, recomputes its scores from shared
  // memory (Consumer::recompute_scores) and runs the full softmax. On every kernel with intra-warpgroup
  // overlap up to head dim 128; in the masked blocks only on two consumers (kStaleMaxMasked: the
  // three-consumer head-dim-64 kernels, at 160 registers a thread, then spill). Head dim 256 keeps the full
  // softmax: +0.3% there, against +7.4% at head dim 64 and +5.5% at 128 (N 8192, H100,
  // bench/results/h100-20261206-fa3-stale-wide/).
  static constexpr bool kStaleMax = kIntraOverlap && kHeadDim <= 128;
  static constexpr bool kStaleMaxMasked = kStaleMax && kConsumerWarpgroups == 2;  // in the masked blocks too
  // Where its slow path runs: after the wait for P V, both arms waiting (P's registers free: what keeps the
  // three-consumer kernels spill-free; +2.0% at head dim 128 N 8192 against the slow path ahead of the wait,
  // +8.1% at head dim 64 N 8192 on three consumers with the stored max), or ahead of it on two consumers at
  // head dim 64, where the late form measured -1.3% with separate programs per tree (N 1024 causal, slower in
  // 5 of 6 rounds, one tie; bench/results/h100-20261206-fa3-stale-d64/). Timed since in one process against
  // it (bench/results/h200-20261206-fa3-late-drain-ab/, H200, 30 rounds) the late form reads 0.999 at N 1024
  // causal and +0.7% at N 512 causal: the place hardly matters there, and the kernels stay as measured.
  static constexpr bool kStaleSlowAfterPv = kStaleMax && !(kHeadDim == 64 && kConsumerWarpgroups == 2);
  // A consumer warpgroup passes over the tile's first key blocks (its last ones in key order) when none of its
  // rows sees them (Consumer::lead_blocks, skip_lead): it keeps pace with the K/V ring and the turns as an
  // idle warpgroup does. Under a causal mask the first warpgroup's rows end a block before the tile's
  // wherever the other warpgroups' rows span a whole block: head dim 64 on 192-row tiles (128-key blocks)
  // and head dim 256 (64-key blocks), at every shift seqlen_k - seqlen_q. Elsewhere (128-row tiles with
  // 128-key blocks) a block can be skipped only for some shifts or right windows, and the code is left out
  // so that those kernels stay as measured. Like kIdleRows, only with intra-warpgroup overlap.
  static constexpr bool kLeadSkip = kWarpSpecialized && kIntraOverlap && !kAblation &&
                                    kRowsPerWarpgroup * (kConsumerWarpgroups - 1) >= kBlockN;
  // The tile change's scalar work off the consumers' path: the scheduler thread, which works out each tile
  // ahead of them, also works out where its rows of O and LSE start and which of its KV blocks need no mask
  // (TileSetup, make_setup); a consumer reads them. Measured against the consumers working them out (H100,
  // one process, 30 rounds, bench/results/h100-20261207-fa3-tile-setup-ab/): d 128 N 512 +1.1%, N 1024
  // +1.2%, N 2048 +0.7%, N 8192 +0.3%, N 1024 causal -0.1%, d 64 N 1024 causal +1.7%, N 2048 +0.6%. Not at
  // head dim 256, where it measured 0.999-1.000 at N 1024-8192 (bench/results/h100-20261207-fa3-tile-setup-
  // d256-ab/), nor on the three-consumer GQA-packed kernels (8 bytes of spills with it).
  static constexpr bool kSetupFromScheduler =
      kWarpSpecialized && kHeadDim != 256 && !(kPackGqa && kConsumerWarpgroups == 3);
  // The tile's first block with its Q K^T and the deferred epilogue under it compiled once and only its
  // softmax in the two forms (masked, unmasked; Consumer::run), rather than all of it per form: at head dim
  // 128, where it measured +0.3% to +1.6% (H100, one process, 30 rounds; N 512-8192, and N 512 and 1024
  // causal; bench/results/h100-20261207-fa3-first-block-once-ab/). Not at head dim 64 on two consumers,
  // where it measured -5.3% at N 512 causal and -2.5% at N 1024 causal. The one copy of the epilogue has the
  // wgmma wait ptxas injects (C7517), which only the masked copy had: with it the unmasked form's epilogue
  // too runs after the first Q K^T completes, and the kernel still measured faster.
  static constexpr bool kFirstBlockOnce = kDeferEpilogue && kConsumerWarpgroups == 2 && kHeadDim == 128;
  static constexpr int kConsumerThreads = kConsumerWarpgroups * sm90::kWarpgroupThreads;
  static constexpr int kThreads = kConsumerThreads + (kWarpSpecialized ? sm90::kWarpgroupThreads : 0);
  // Register split after setmaxnreg: the producer warpgroup (load thread, scheduler thread) needs its
  // tile and ring state, the consumers hold S, P and O. The registers come from what the CTA got at
  // launch (168 per thread at 384 threads, 128 at 512), so the sum must stay within that, not within the
  // register file (a split that asks for more leaves the consumers' setmaxnreg.inc waiting forever): two
  // consumers 40 * 128 + 232 * 256 = 64512 = 168 * 384 (24 / 240 spilled in the producer once it kept
  // the tile queue); three 32 * 128 + 160 * 384 = 65536 = 128 * 512.
  static constexpr int kProducerRegs = kConsumerWarpgroups == 2 ? 40 : 32;
  static constexpr int kConsumerRegs = kConsumerWarpgroups == 2 ? 232 : 160;
  static_assert(kConsumerWarpgroups == 2 || kConsumerWarpgroups == 3, "two or three consumer warpgroups");

  static constexpr int kColBlocks = kHeadDim / sm90::kSwizzleElems;  // 64-wide column blocks of the head dim
  static constexpr int kQkSteps = kHeadDim / 16;                      // k16 steps of Q K^T
  static constexpr int kPvSteps = kBlockN / 16;                       // k16 steps of P V
  static constexpr int kElemBytes = 2;
  static constexpr uint32_t kQBytes = uint32_t(kBlockM) * kHeadDim * kElemBytes;
  static constexpr uint32_t kKvBytes = uint32_t(kBlockN) * kHeadDim * kElemBytes;  // one K (or V) stage

  static_assert(kHeadDim % sm90::kSwizzleElems == 0, "the head dim must be whole 128-byte swizzle rows");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "kBlockN is the N of the Q K^T wgmma");
  static_assert(kQBytes % sm90::kSwizzleAtomBytes == 0 && kKvBytes % sm90::kSwizzleAtomBytes == 0,
                "every tile must start on a 1024-byte swizzle boundary");
};

// One tile of work (fa3_fwd_kernel.cuh, make_tile): computed once per tile and handed to every role
// through the tile queue, so the producer and the consumers agree exactly on the number of blocks (which
// decides how many ring stages each side advances).
struct alignas(16) TileWork {
  int batch, head, kv_head;  // head: the query head (kPackGqa: the group's first, kv_head * G)
  int row_begin, len_q;  // the tile's first row and the sequence's rows (kPackGqa: tokens x G)
  int q_row, k_row, batch_coord;  // TMA coordinates of the tile's first Q row (kPackGqa: token) and the
                                  // sequence's first key
  int n_first, n_last;            // KV blocks [n_first, n_last), visited from n_last - 1 down
  bool valid;                     // the tile has rows (varlen sequences can be shorter than the maximum)
  bool end;                       // past the last tile: the CTA is done
  __device__ int blocks() const { return n_last - n_first; }
};

// What the scheduler thread also works out per tile where Fa3Config::kSetupFromScheduler (make_setup), so
// that the consumers' tile change reads it instead of computing it: where the tile's (batch, head) rows
// start in out and lse (elements), and its KV blocks that need no per-element mask, [vis_lo, vis_hi).
struct alignas(16) TileSetup {
  int64_t out_off, lse_off;
  int vis_lo, vis_hi;
};

// One CTA's shared memory. Tiles first (each a multiple of 1024 bytes, so each starts on a swizzle
// boundary when the struct does), barriers last.
template <typename Cfg, typename T>
struct Fa3Shared {
  T q[Cfg::kQBuffers][Cfg::kBlockM * Cfg::kHeadDim];
  T k[Cfg::kStages][Cfg::kBlockN * Cfg::kHeadDim];
  T v[Cfg::kStages][Cfg::kBlockN * Cfg::kHeadDim];
  // The epilogue's staging of O: per consumer warp, 16 rows x 64 columns (one 128-byte column block of its
  // rows at a time), 16-byte chunks XOR-swizzled by row so that stmatrix and the row reads are conflict-free.
  T o_stage[Cfg::kConsumerWarpgroups * sm90::kWarpgroupWarps][16 * sm90::kSwizzleElems];
  // full: TMA bytes landed (one producer arrival + transaction bytes). v_empty: every consumer
  // warpgroup's wgmma reading the stage completed (one arrival per consumer warpgroup). k_empty: every
  // consumer warp done with the stage, its softmax's slow path included (one arrival per consumer warp).
  // q_empty: every consumer warp past the tile's last Q K^T and softmax (one arrival per warp). The CTA's
  // t-th tile takes Q buffer t % kQBuffers, phase (t / kQBuffers) & 1 of its pair.
  uint64_t q_full[Cfg::kQBuffers], q_empty[Cfg::kQBuffers];
  uint64_t k_full[Cfg::kStages], k_empty[Cfg::kStages];
  uint64_t v_full[Cfg::kStages], v_empty[Cfg::kStages];
  // The tile queue (warp-specialized kernels): the slot holds the CTA's current tile (end: none left).
  // full: the scheduler thread stored it (one arrival); empty: every reader has taken it (one arrival
  // per consumer thread and one from the load thread; with one arrival per warp after __syncwarp,
  // compute-sanitizer's racecheck reported the other lanes' reads against the scheduler's next write).
  uint64_t tile_full, tile_empty;
  TileWork tile_slot;
  // Fa3Config::kSetupFromScheduler: the setup of the CTA's t-th tile in entry t % 2, written with the slot.
  // Entry t % 2 is written again for tile t + 2, only after every reader has taken tile t + 1, so a
  // consumer may read it until it takes its next tile (at the tile's end, for the epilogue).
  TileSetup tile_setup[2];
};

template <typename Cfg, typename T>
constexpr int fa3_smem_bytes() {
  return int(sizeof(Fa3Shared<Cfg, T>)) + sm90::kSwizzleAtomBytes;  // slack to align the base to 1024
}

// Kernel parameters. The tensor maps view q, k and v as 4-d tensors (head_dim, rows, heads, batch),
// innermost first; varlen problems use one "batch" of total rows and add cu_seqlens to the row coordinate.
struct Fa3Params {
  CUtensorMap tm_q, tm_k, tm_v;
  AttnParams attn;
  int num_m_blocks;   // Q tiles per (batch, head): ceil(seqlen_q / kBlockM), seqlen_q the varlen maximum
                      // (kPackGqa: per (batch, KV head), ceil(seqlen_q * G / kBlockM))
  int num_tiles;      // num_m_blocks * batch * heads_q (kPackGqa: heads_kv)
  int section_heads;  // (batch, query head) pairs per L2 section of the tile order (make_tile), >= 1; with
                      // kPackGqa (batch, KV head) pairs
  // Work queue of warp-specialized kernels: one int that is zero when the kernel starts and that the
  // kernel puts back to zero (claim_tile). Unused (nullptr) without warp specialization, whose consumers
  // take the static schedule, tile blockIdx.x + k * gridDim.x.
  int* tile_counter;
  int pack_group;  // kPackGqa: query heads per KV head (G), which divides kBlockM; 1 otherwise
};

}  // namespace flashattn::cuda::fa3
