// Launch of one fa3 forward kernel: tensor maps, persistent grid and its tile order and work queue,
// shared-memory opt-in.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/candidate.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/stream_buffer.h"
#include "cuda/common/stream_counters.h"
#include "cuda/launch.h"
#include "cuda/sm90/fa3_fwd_kernel.cuh"
#include "cuda/sm90/fa3_schedule.h"

namespace flashattn::cuda::fa3 {

constexpr int kSm90SmemPerBlock = 227 * 1024;  // opt-in dynamic shared memory per CTA on sm_90

// Fills the three tensor maps; defined in fa3_fwd.cu (one driver entry point, looked up once).
// pack_group > 1: Q as GQA-packed tiles (Fa3Config::kPackGqa).
Status make_tensor_maps(const detail::Problem& p, int block_m, int block_n, int pack_group, Fa3Params* params);

// Key-block width per head dim. Wider blocks spread each block's fixed costs (barriers, row statistics, O
// rescale) over more keys, as far as the registers allow: a consumer thread holds S (kBlockN / 2), P
// (kBlockN / 4) and O (head_dim / 2) registers. Head dim 128 once took 176 keys without a mask; 128 keys
// measured 3-6% faster up to N 4096 and the same beyond (the key counts of the usual sequence lengths are
// multiples of 128, so the tile's first block needs no mask), and masked problems waste less work on the
// diagonal with narrower blocks.
constexpr int fa3_block_n(int head_dim) { return head_dim == 256 ? 64 : 128; }

// The kernel a head dim runs on: 64, 128 or 256 columns; a multiple of 8 between them runs on the next
// larger one with its columns past the head dim zero (Fa3Config::kPartialCols).
constexpr int fa3_kernel_head_dim(int64_t head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }

// Consumer warpgroups per CTA: at head dim 64 a block's GEMMs are short next to its softmax, so three
// consumers (192-row tiles) keep the tensor cores busy while two of them run softmax.
constexpr int fa3_consumers(int head_dim) { return head_dim == 64 ? 3 : 2; }

// ... except for causal problems whose query and key lengths are both at most this: there a tile has few key
// blocks (a 192-row tile at N 512 also pads a third of its last rows), and two consumers (128-row tiles,
// more tiles to spread over the SMs) measured 11-12% faster at N 512 and 1024 on an H200, while they are
// 3-10% slower from N 2048 and 3-15% slower without a mask at every length. With the three-stage ring and
// the scheduler's tile setup, 2048 was timed again: 3.7% slower at causal N 2048 (H100, one process,
// bench/results/h100-20261207-fa3-d64-two-consumer-2048-ab/).
constexpr int64_t kFa3TwoConsumerCausalMaxLen = 1024;
inline int fa3_consumers(const detail::Problem& p) {
  const int d = fa3_kernel_head_dim(p.head_dim);
  if (d == 64 && p.causal && p.seqlen_q <= kFa3TwoConsumerCausalMaxLen && p.seqlen_k <= kFa3TwoConsumerCausalMaxLen)
    return 2;
  return fa3_consumers(d);
}

// K/V ring depth: four stages for head dim 64 on 192-row tiles, three on its 128-row tiles, two elsewhere
// (head dims 128 and 256 have no room for a third). Four at head dim 64, measured on the H200
// (bench/results/h200-20261203-fa3-d64-short-causal/, forward sweep, 2 passes): 192-row tiles non-causal
// +1.2, +1.7, +3.6, +1.9% at N 512-4096 (both passes above both of the base's), -0.3..+0.3% beyond and
// causal (kernels the change did not touch moved -2.2..+1.3% in that call). On the 128-row tiles (causal
// problems up to 1024 keys, one to eight key blocks a tile) a tile's second block waits for the stage of the
// tile before's last block; with three stages it takes an earlier one. Timed in one process against two
// stages (H100, bench/results/h100-20261207-fa3-d64-ring-ab/, two calls): causal N 768 +1.4%, N 1024 +1.8%
// in both calls, N 512 +0.2% and -0.6% (the no-change controls 1.000 and 0.991); four stages: N 512 -0.8%,
// N 1024 +0.7%.
constexpr int fa3_stages(int head_dim, int consumers) {
  return head_dim != 64 ? 2 : consumers == 3 ? 4 : 3;
}

// Ping-pong between the consumers everywhere but on the 128-row tiles of head dim 64 (short causal
// problems: one to eight key blocks per tile), where each consumer issues its GEMMs as soon as its operands
// are there instead of waiting for the other's turn. Measured on the H200 (same call as above): +5.6% at
// N 512 and +3.9% at N 1024 (causal; the sweep's two shapes on those tiles), both passes. Without ping-pong
// at every head dim (a second call, ab2.json there): 0.988x over the sweep, head dim 64 on 192-row tiles
// -1.2..-5.2%, 128 -3.1..+2.7%, 256 -1.8..+3.1%; the other kernels keep it.
constexpr bool fa3_ping_pong(int head_dim, int consumers) { return !(head_dim == 64 && consumers == 2); }

template <int kHeadDim, bool kWs = true, bool kPing = true, bool kOverlap = true,
          int kConsumers = fa3_consumers(kHeadDim), bool kAblation = false, bool kPartialCols = false,
          bool kPackGqa = false, bool kSoftcap = true>
using ConfigFor = Fa3Config<kHeadDim, kConsumers, fa3_block_n(kHeadDim), fa3_stages(kHeadDim, kConsumers), kWs,
                            kPing && fa3_ping_pong(kHeadDim, kConsumers), kOverlap, kAblation, kPartialCols, kPackGqa,
                            kSoftcap>;

// GQA packing (Fa3Config::kPackGqa, the rule in gqa_pack_group) on the full-width kernels of head dims 64
// and 128: not on the partial-column forms, and not at head dim 256, whose packed kernel spilled 24 bytes
// (the per-row output addresses on top of 128 accumulator registers). Returns G, or 1 for no packing.
constexpr bool fa3_packs_gqa(int kernel_head_dim) { return kernel_head_dim != 256; }
inline int fa3_pack_group(const detail::Problem& p, int block_m) {
  if (p.head_dim != fa3_kernel_head_dim(p.head_dim) || !fa3_packs_gqa(int(p.head_dim))) return 1;
  return gqa_pack_group(p.heads_q, p.heads_kv, p.seqlen_q, block_m);
}

// One of the ablation's variants (Fa3Config::kAblation): the head dim's own tile shape.
template <int kHeadDim, bool kWs, bool kPing, bool kOverlap>
using AblationConfigFor = ConfigFor<kHeadDim, kWs, kPing, kOverlap, fa3_consumers(kHeadDim), /*kAblation=*/true>;

inline bool has_masked_blocks(const detail::Problem& p) {
  return p.causal || p.window_left >= 0 || p.window_right >= 0;
}

template <typename Cfg, typename T>
Status launch_config(const detail::Problem& prob, const Context& ctx) {
  static_assert(!Cfg::kPackGqa || !Cfg::kPartialCols, "GQA packing runs on the full-width kernels only");
  // Query heads per tile row group: launch_full takes a packed kernel only where this is > 1.
  const int pack_group = Cfg::kPackGqa ? fa3_pack_group(prob, Cfg::kBlockM) : 1;
  Fa3Params params{};
  params.attn = make_params(prob);
  params.pack_group = pack_group;
  Status s = make_tensor_maps(prob, Cfg::kBlockM, Cfg::kBlockN, pack_group, &params);
  if (!s.ok()) return s;
  const int64_t pair_heads = Cfg::kPackGqa ? prob.heads_kv : prob.heads_q;  // (batch, head) pairs per batch
  params.num_m_blocks = int((prob.seqlen_q * pack_group + Cfg::kBlockM - 1) / Cfg::kBlockM);
  params.num_tiles = params.num_m_blocks * int(prob.batch * pair_heads);
  if (params.num_tiles == 0) return Status::Ok();
  auto* kernel = fa3_fwd_kernel<Cfg, T>;
  constexpr int kSmem = fa3_smem_bytes<Cfg, T>();
  static_assert(kSmem <= kSm90SmemPerBlock, "the tiles do not fit in an H100/H200 CTA's shared memory");
  FA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  // Persistent: one CTA per SM (the register split needs the whole register file), never more CTAs than tiles.
  const int grid = params.num_tiles < ctx.sm_count ? params.num_tiles : ctx.sm_count;
  params.section_heads = l2_section_heads(prob.batch, pair_heads, prob.heads_kv, prob.seqlen_k, prob.head_dim,
                                          int(sizeof(T)), params.num_m_blocks, grid, has_masked_blocks(prob));
  // The work queue's counter (warp-specialized kernels; the others keep the static schedule).
  StreamBuffer own_counter(ctx.stream);
  if constexpr (Cfg::kWarpSpecialized) {
    s = launch_counters(ctx.device, ctx.stream, 1, &own_counter, &params.tile_counter);
    if (!s.ok()) return s;
  }
  kernel<<<grid, Cfg::kThreads, kSmem, ctx.stream>>>(params);
  FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa3_fwd_kernel");
  return own_counter.release();
}

// The candidate form of a full kernel configuration (Fa3Config::kCandidate, cuda/common/candidate.h).
template <typename Cfg>
struct CandidateOf;
template <int D, int C, int N, int S, bool kWs, bool kPing, bool kOverlap, bool kAbl, bool kPart, bool kPack,
          bool kCap>
struct CandidateOf<Fa3Config<D, C, N, S, kWs, kPing, kOverlap, kAbl, kPart, kPack, kCap, false>> {
  using type = Fa3Config<D, C, N, S, kWs, kPing, kOverlap, kAbl, kPart, kPack, kCap, true>;
};

// A full kernel configuration, or its candidate form where the build has one and the call asks for it.
template <typename Cfg, typename T>
Status launch_shipped(const detail::Problem& prob, const Context& ctx) {
#if defined(FLASHATTN_FA3_CANDIDATE)
  if (fa3_candidate_requested()) return launch_config<typename CandidateOf<Cfg>::type, T>(prob, ctx);
#endif
  return launch_config<Cfg, T>(prob, ctx);
}

// The key-block width of the full kernel a call runs, for its name: the candidate form's where the build has
// one and the call asks for it (a candidate may change the tile), fa3_block_n otherwise.
inline int fa3_run_block_n(int head_dim, int consumers) {
#if defined(FLASHATTN_FA3_CANDIDATE)
  if (fa3_candidate_requested()) {
    if (head_dim == 64)
      return consumers == 3 ? CandidateOf<ConfigFor<64, true, true, true, 3>>::type::kBlockN
                            : CandidateOf<ConfigFor<64, true, true, true, 2>>::type::kBlockN;
    if (head_dim == 128) return CandidateOf<ConfigFor<128>>::type::kBlockN;
    return CandidateOf<ConfigFor<256>>::type::kBlockN;
  }
#endif
  (void)consumers;
  return fa3_block_n(head_dim);
}

// Whether a problem runs the full kernel with the softcap's code (the kernel name says so too).
inline bool fa3_softcap_kernel(const detail::Problem& p) { return p.softcap > 0.0f; }

// The full kernel (kConsumers: fa3_consumers of the problem where a head dim has two tile shapes), on the
// kernel of kHeadDim columns or, for a smaller head dim, its partial-column form (Fa3Config::kPartialCols),
// with the softcap's code where the problem has a softcap and without it otherwise (Fa3Config::kSoftcap).
template <int kHeadDim, int kConsumers, bool kPartialCols, bool kPackGqa, bool kSoftcap>
using FullConfigFor = ConfigFor<kHeadDim, true, true, true, kConsumers, false, kPartialCols, kPackGqa, kSoftcap>;
template <int kHeadDim, typename T, int kConsumers, bool kSoftcap>
Status launch_full_forms(const detail::Problem& prob, const Context& ctx) {
  if (prob.head_dim < kHeadDim)
    return launch_shipped<FullConfigFor<kHeadDim, kConsumers, true, false, kSoftcap>, T>(prob, ctx);
  if constexpr (fa3_packs_gqa(kHeadDim)) {
    if (fa3_pack_group(prob, 64 * kConsumers) > 1)
      return launch_shipped<FullConfigFor<kHeadDim, kConsumers, false, true, kSoftcap>, T>(prob, ctx);
  }
  return launch_shipped<FullConfigFor<kHeadDim, kConsumers, false, false, kSoftcap>, T>(prob, ctx);
}
template <int kHeadDim, typename T, int kConsumers = fa3_consumers(kHeadDim)>
Status launch_full(const detail::Problem& prob, const Context& ctx) {
  if (fa3_softcap_kernel(prob)) return launch_full_forms<kHeadDim, T, kConsumers, true>(prob, ctx);
  return launch_full_forms<kHeadDim, T, kConsumers, false>(prob, ctx);
}

// The ablation: one overlap compiled out.
template <int kHeadDim, typename T>
Status launch_variant(const detail::Problem& prob, const Context& ctx, Fa3Variant variant) {
  switch (variant) {
    case Fa3Variant::kFull: return launch_full<kHeadDim, T>(prob, ctx);
    case Fa3Variant::kNoWarpSpecialization:
      return launch_config<AblationConfigFor<kHeadDim, false, false, true>, T>(prob, ctx);
    case Fa3Variant::kNoPingPong: return launch_config<AblationConfigFor<kHeadDim, true, false, true>, T>(prob, ctx);
    case Fa3Variant::kNoIntraWarpgroupOverlap:
      return launch_config<AblationConfigFor<kHeadDim, true, true, false>, T>(prob, ctx);
  }
  return Status::Invalid("algorithm fa3: unknown kernel variant");
}

// One per kernel head dim, each in its own translation unit (fa3_fwd_hd*.cu) so they compile in parallel. The
// ablation variants are built for head dim 128 only (the benchmark's shape; fa3_forward refuses the others).
Status launch_hd64(const detail::Problem& prob, const Context& ctx);
Status launch_hd128(const detail::Problem& prob, const Context& ctx, Fa3Variant variant);
Status launch_hd256(const detail::Problem& prob, const Context& ctx);

}  // namespace flashattn::cuda::fa3
