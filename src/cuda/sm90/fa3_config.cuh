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
          bool kPingPong_, bool kIntraOverlap_>
struct Fa3Config {
  static constexpr int kHeadDim = kHeadDim_;
  // Each consumer warpgroup owns 64 rows (one wgmma M) of the Q tile.
  static constexpr int kConsumerWarpgroups = kConsumerWarpgroups_;
  static constexpr int kBlockM = 64 * kConsumerWarpgroups;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // Overlap switches (all on in the shipped kernel; the ablation benchmark turns each off).
  static constexpr bool kWarpSpecialized = kWarpSpecialized_;  // producer warpgroup issues the TMA loads
  static constexpr bool kPingPong = kPingPong_ && kWarpSpecialized_;  // consumers take turns issuing GEMMs
  static constexpr bool kIntraOverlap = kIntraOverlap_;  // softmax of block j runs under P V of block j-1

  static constexpr int kRowsPerWarpgroup = kBlockM / kConsumerWarpgroups;  // one wgmma M (64)
  static constexpr int kConsumerThreads = kConsumerWarpgroups * sm90::kWarpgroupThreads;
  static constexpr int kThreads = kConsumerThreads + (kWarpSpecialized ? sm90::kWarpgroupThreads : 0);
  // Register split after setmaxnreg: the producer needs a few addresses and its tile-queue state (at 24
  // the head-dim-256 producer spilled), the consumers hold S, P and O. Two consumers: 32 * 128 + 240 * 256
  // = 65536 registers; three: 32 * 128 + 160 * 384 = 65536 (the register file, at one CTA per SM).
  static constexpr int kProducerRegs = 32;
  static constexpr int kConsumerRegs = kConsumerWarpgroups == 2 ? 240 : 160;
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

constexpr int kTileSlots = 2;  // the producer runs at most one tile ahead of the consumers

// One CTA's shared memory. Tiles first (each a multiple of 1024 bytes, so each starts on a swizzle
// boundary when the struct does), barriers last.
template <typename Cfg, typename T>
struct Fa3Shared {
  T q[Cfg::kBlockM * Cfg::kHeadDim];
  T k[Cfg::kStages][Cfg::kBlockN * Cfg::kHeadDim];
  T v[Cfg::kStages][Cfg::kBlockN * Cfg::kHeadDim];
  // full: TMA bytes landed (one producer arrival + transaction bytes). k/v empty: every consumer
  // warpgroup's wgmma reading the stage completed (one arrival per consumer warpgroup). q_empty: every
  // consumer warpgroup's last Q K^T of the tile completed (one arrival per consumer warpgroup).
  uint64_t q_full, q_empty;
  uint64_t k_full[Cfg::kStages], k_empty[Cfg::kStages];
  uint64_t v_full[Cfg::kStages], v_empty[Cfg::kStages];
  // The tile queue from the producer to the consumers (warp-specialized kernels): slot t % kTileSlots holds
  // the index of the CTA's t-th tile (num_tiles or more: no tile left). full: the producer stored it (one
  // arrival); empty: every consumer warp has read it (one arrival per warp).
  uint64_t tile_full[kTileSlots], tile_empty[kTileSlots];
  int tile_slot[kTileSlots];
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
  int num_tiles;      // num_m_blocks * batch * heads_q
  int section_heads;  // (batch, query head) pairs per L2 section of the tile order (make_tile), >= 1
  // Work queue of warp-specialized kernels: one int that is zero when the kernel starts and that the
  // kernel puts back to zero (claim_tile). nullptr: the static schedule, tile blockIdx.x + k * gridDim.x.
  int* tile_counter;
};

}  // namespace flashattn::cuda::fa3
