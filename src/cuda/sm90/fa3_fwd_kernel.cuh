// FlashAttention-3 forward on Hopper (sm90a).
//
// Roles. Warpgroup 0 is the producer: after lowering its register budget (setmaxnreg) one thread issues
// every TMA load and another hands out the tiles (below). The other two (or three) warpgroups are
// consumers: each owns 64 rows of the CTA's Q tile, raises its register budget and runs S = Q K^T (wgmma,
// both operands in shared memory), the online softmax and O += P V (wgmma, P from registers, V from shared
// memory), fp32 accumulators.
//
// Pipeline. Q has one or two buffers (kQBuffers; q_full / q_empty each), a buffer released as soon as its
// tile's last Q K^T and softmax have completed (each warp arrives for itself); the CTA's t-th tile takes
// buffer t % kQBuffers and its phase (t / kQBuffers) & 1, even a tile without keys (skip_q). With one
// buffer the next tile's Q loads under the last P V and the epilogue; with two it loads during the previous
// tile, and a tile's epilogue runs under the next tile's first Q K^T (kDeferEpilogue). K and V rotate
// through kStages buffers each with their own full/empty mbarriers, so Q K^T of a block can start before
// its V has landed. Block counters run on across tiles: the stage of the i-th block a CTA ever handles is
// i % kStages and its phase (i / kStages) & 1. Consumers wait `full` with that parity; the producer waits
// `empty` with the opposite parity (a fresh barrier counts as having completed the phase before phase 0).
//
// Two levels of overlap:
//  - Ping-pong between the consumer warpgroups: named barriers hand the right to issue GEMMs round the
//    consumers in turn, so one warpgroup's GEMMs occupy the tensor cores while the others run softmax.
//  - Inside a warpgroup: issue Q K_j^T, then P_{j-1} V_{j-1}; wait for the first, run the softmax of block
//    j while P V is still in flight, then wait for P V and rescale O. The softmax first takes the
//    exponentials against the stored row max, without the block's max (kStaleMax, softmax_rows_stale); a
//    warp for which that does not hold waits for P V, recomputes its scores from the K stage (released
//    after the softmax) and runs the full softmax.
//
// Scheduling. A persistent grid (one CTA per SM) takes tiles from a work queue: each CTA starts with tile
// blockIdx.x; a scheduler thread in the producer warpgroup claims the next one with an atomicAdd on a
// global counter when the current one starts, works out its TileWork and hands it to the load thread and
// the consumers through a one-slot queue in shared memory (with, where Cfg::kSetupFromScheduler, the tile's
// setup: where its rows of O and LSE start and which KV blocks need no mask, so that the consumers' tile
// change only reads them). CTAs that finish early take more tiles, which evens out the unequal tiles of a
// causal mask. (Without warp specialization: the static schedule.)
// Tile order (make_tile): L2 sections, each a run of (batch, query head) pairs (l2_section_heads: one pair
// without a mask; under one, pairs whose K and V fit in a slice of L2); inside a section the Q-tile index
// descends outermost (longest tiles first under a causal mask) and the pair runs innermost. The CTAs busy
// at one time then work on a few pairs and share their K/V in L2 (query heads of one KV head are adjacent
// pairs), instead of each reading its own pair's K/V from device memory.
//
// The KV blocks of a tile are visited from the last to the first: the blocks that need a per-element mask
// (causal diagonal, end of the keys) come first, then the fully visible ones, then those at a sliding
// window's left edge, each group in its own loop.
#pragma once

#include <cuda.h>

#include "core/column_mask.h"
#include "core/mask.h"
#include "core/numeric.h"
#include "core/softmax_online.h"
#include "cuda/common/problem_params.cuh"
#include "cuda/common/ptx_sm80.cuh"
#include "cuda/common/smem_swizzle.cuh"
#include "cuda/sm90/fa3_config.cuh"
#include "cuda/sm90/sm90_ptx.cuh"
#include "cuda/sm90/wgmma_ops.cuh"

namespace flashattn::cuda::fa3 {

using sm90::kWarpgroupThreads;

// Named barrier ids: 1, 2, 3 for the ping-pong turn of consumers 0, 1, 2 (0 is __syncthreads); after them
// one per consumer warpgroup for its own four warps (Consumer::sync_warpgroup).
constexpr int kTurnBarrier = 1;
// Threads that meet at a turn barrier: the warpgroup taking its turn and the one handing it over.
constexpr int kTurnThreads = 2 * kWarpgroupThreads;

// Everything about tile `tile` (num_tiles or more: w.end). Computed once per tile by whoever hands tiles
// out: the scheduler thread, or every thread under the static schedule. Section s of the order holds
// pairs [s * section_heads, + heads_here) (the last one may hold fewer) with all their Q tiles.
template <typename Cfg>
__device__ __forceinline__ TileWork make_tile(const Fa3Params& p, int tile) {
  const AttnParams& a = p.attn;
  TileWork w;
  w.end = tile >= p.num_tiles;
  if (w.end) {
    w.valid = false;
    w.n_first = w.n_last = 0;
    return w;
  }
  // kPackGqa: the pairs are (batch, KV head), each with the rows of its G query heads (token-major).
  const unsigned bh_count = unsigned(a.batch * (Cfg::kPackGqa ? a.heads_kv : a.heads_q));
  const unsigned section_tiles = unsigned(p.section_heads * p.num_m_blocks);
  const unsigned section = unsigned(tile) / section_tiles;
  const unsigned first_bh = section * unsigned(p.section_heads);
  const unsigned heads_here = min(unsigned(p.section_heads), bh_count - first_bh);
  const unsigned r = unsigned(tile) - section * section_tiles;
  const unsigned bh = first_bh + r % heads_here;
  const int m_block = p.num_m_blocks - 1 - int(r / heads_here);
  if constexpr (Cfg::kPackGqa) {
    w.batch = int(bh / unsigned(a.heads_kv));
    w.kv_head = int(bh % unsigned(a.heads_kv));
    w.head = w.kv_head * p.pack_group;
    w.row_begin = m_block * Cfg::kBlockM;
    w.len_q = a.len_q(w.batch) * p.pack_group;
  } else {
    w.batch = int(bh / unsigned(a.heads_q));
    w.head = int(bh % unsigned(a.heads_q));
    w.kv_head = int(unsigned(w.head) / unsigned(a.heads_q / a.heads_kv));
    w.row_begin = m_block * Cfg::kBlockM;
    w.len_q = a.len_q(w.batch);
  }
  w.valid = w.row_begin < w.len_q;
  const bool varlen = a.cu_q != nullptr;
  w.q_row = a.q_offset(w.batch) + (Cfg::kPackGqa ? w.row_begin / p.pack_group : w.row_begin);
  w.k_row = a.k_offset(w.batch);
  w.batch_coord = varlen ? 0 : w.batch;
  w.n_first = w.n_last = 0;
  if (w.valid) {
    const core::MaskSpec mask = a.mask(w.batch);
    const int row_end = min(w.row_begin + Cfg::kBlockM, w.len_q);
    // The mask goes by query token: with kPackGqa tokens [row_begin / G, (row_end - 1) / G] (G divides kBlockM).
    const core::BlockRange r = Cfg::kPackGqa ? core::kv_block_range(mask, w.row_begin / p.pack_group,
                                                                     (row_end - 1) / p.pack_group + 1, Cfg::kBlockN)
                                              : core::kv_block_range(mask, w.row_begin, row_end, Cfg::kBlockN);
    w.n_first = int(r.first);
    w.n_last = int(r.last);
  }
  return w;
}

// The setup (TileSetup) of a tile with rows and blocks, worked out by the scheduler thread where
// Cfg::kSetupFromScheduler.
template <typename Cfg>
__device__ __forceinline__ TileSetup make_setup(const Fa3Params& p, const TileWork& w) {
  const AttnParams& a = p.attn;
  TileSetup s;
  const int64_t q_off = a.q_offset(w.batch);
  s.out_off = w.batch * a.out.batch_stride + w.head * a.out.head_stride + q_off * a.out.row_stride;
  s.lse_off = w.batch * a.lse.batch_stride + w.head * a.lse.head_stride + q_off * a.lse.row_stride;
  // As Consumer::run works them out without kSetupFromScheduler (the mask goes by query token). Written out
  // twice: with the two sharing one helper, the compiled kernels changed (head dim 256's too), and these are
  // the measured ones.
  const core::MaskSpec32 mask = a.mask32(Cfg::kPackGqa ? a.len_q(w.batch) : w.len_q, a.len_k(w.batch));
  const int row_end = min(w.row_begin + Cfg::kBlockM, w.len_q);
  const int last_token = Cfg::kPackGqa ? (row_end - 1) / p.pack_group : row_end - 1;
  const int first_token = Cfg::kPackGqa ? w.row_begin / p.pack_group : w.row_begin;
  int vis_lo = (mask.key_begin(last_token) + Cfg::kBlockN - 1) / Cfg::kBlockN;
  int vis_hi = mask.key_end(first_token) / Cfg::kBlockN;
  vis_lo = max(vis_lo, w.n_first);
  vis_hi = min(vis_hi, w.n_last);
  if (vis_lo >= vis_hi) vis_lo = vis_hi = w.n_first;
  s.vis_lo = vis_lo;
  s.vis_hi = vis_hi;
  return s;
}

// ---- loads (issued by one thread) ---------------------------------------------------------------------

// The Q buffer of the CTA's t-th tile and the phase of its barriers: every tile takes one phase of its
// buffer's pair, so tile t takes buffer t % kQBuffers in phase (t / kQBuffers) & 1.
template <typename Cfg>
__device__ __forceinline__ int q_buffer(int t) { return t % Cfg::kQBuffers; }
template <typename Cfg>
__device__ __forceinline__ uint32_t q_phase(int t) { return uint32_t(t / Cfg::kQBuffers) & 1; }

// Q of the CTA's t-th tile.
template <typename Cfg, typename T>
__device__ __forceinline__ void load_q(Fa3Shared<Cfg, T>& sm, const Fa3Params& p, const TileWork& w, int t) {
  const int b = q_buffer<Cfg>(t);
  // Hazard: every consumer warpgroup's last Q K^T of the buffer's previous tile (t - kQBuffers) must have
  // completed.
  sm90::mbar_wait(&sm.q_empty[b], q_phase<Cfg>(t) ^ 1);
  sm90::mbar_arrive_expect_tx(&sm.q_full[b], Cfg::kQBytes);
  if constexpr (Cfg::kPackGqa) {
    // (head dim, head in group, KV head, token, batch): kBlockM / G tokens x G heads, token-major.
#pragma unroll
    for (int c = 0; c < Cfg::kColBlocks; ++c)
      sm90::tma_load_5d(sm.q[b] + c * Cfg::kBlockM * sm90::kSwizzleElems, &p.tm_q, &sm.q_full[b],
                        c * sm90::kSwizzleElems, 0, w.kv_head, w.q_row, w.batch_coord);
  } else {
#pragma unroll
    for (int c = 0; c < Cfg::kColBlocks; ++c)
      sm90::tma_load_4d(sm.q[b] + c * Cfg::kBlockM * sm90::kSwizzleElems, &p.tm_q, &sm.q_full[b],
                        c * sm90::kSwizzleElems, w.q_row, w.head, w.batch_coord);
  }
}

// A tile without keys (or rows) loads no Q but still takes its Q phase, so that tile t's phase stays what
// q_phase says (and the consumers need no count of their own): arrive on q_full with no transaction bytes.
template <typename Cfg, typename T>
__device__ __forceinline__ void skip_q(Fa3Shared<Cfg, T>& sm, int t) {
  const int b = q_buffer<Cfg>(t);
  sm90::mbar_wait(&sm.q_empty[b], q_phase<Cfg>(t) ^ 1);
  sm90::mbar_arrive(&sm.q_full[b]);
}

// Loads K (kV = false) or V of block n into the stage of ring position `iter`.
template <bool kV, typename Cfg, typename T>
__device__ __forceinline__ void load_kv(Fa3Shared<Cfg, T>& sm, const Fa3Params& p, const TileWork& w, int n, int iter) {
  const int stage = iter % Cfg::kStages;
  const uint32_t phase = (iter / Cfg::kStages) & 1;
  uint64_t* empty = kV ? &sm.v_empty[stage] : &sm.k_empty[stage];
  uint64_t* full = kV ? &sm.v_full[stage] : &sm.k_full[stage];
  T* dst = kV ? sm.v[stage] : sm.k[stage];
  const CUtensorMap* map = kV ? &p.tm_v : &p.tm_k;
  // Hazard: the stage held block iter - kStages; every consumer thread must have finished its wgmma on it.
  sm90::mbar_wait(empty, phase ^ 1);
  sm90::mbar_arrive_expect_tx(full, Cfg::kKvBytes);
#pragma unroll
  for (int c = 0; c < Cfg::kColBlocks; ++c)
    sm90::tma_load_4d(dst + c * Cfg::kBlockN * sm90::kSwizzleElems, map, full, c * sm90::kSwizzleElems,
                      w.k_row + n * Cfg::kBlockN, w.kv_head, w.batch_coord);
}

// ---- tile queue -------------------------------------------------------------------------------------------

// The CTA's next tile from the work queue. Every CTA draws a ticket once per tile it handles, the grid's
// first tiles included, so the draws number num_tiles in all and ticket num_tiles - 1 is the last one:
// whoever draws it puts the counter back to zero for the next kernel on the stream.
__device__ __forceinline__ int claim_tile(const Fa3Params& p) {
  const int ticket = atomicAdd(p.tile_counter, 1);
  if (ticket == p.num_tiles - 1) atomicExch(p.tile_counter, 0);
  return int(gridDim.x) + ticket;
}

// The scheduler thread (warp 1 of the producer warpgroup) publishes the CTA's tiles in order through the
// one-slot queue. It claims tile t + 1 as soon as every reader has taken tile t, so a CTA holds one tile
// in reserve while it starts the current one: the loads of t + 1 can follow those of t without a wait,
// and the atomic's round trip and the tile's arithmetic stay off the load thread's path.
template <typename Cfg, typename T>
__device__ void scheduler_loop(Fa3Shared<Cfg, T>& sm, const Fa3Params& p) {
  int tile = blockIdx.x;
  for (int t = 0;; ++t) {
    // Hazard: every reader (each consumer thread, the load thread) must have taken tile t - 1 from the slot.
    sm90::mbar_wait(&sm.tile_empty, (t & 1) ^ 1);
    if (t > 0) tile = claim_tile(p);
    const TileWork w = make_tile<Cfg>(p, tile);
    if constexpr (Cfg::kSetupFromScheduler) {
      if (w.valid && w.blocks() > 0) sm.tile_setup[t & 1] = make_setup<Cfg>(p, w);
    }
    sm.tile_slot = w;
    sm90::mbar_arrive(&sm.tile_full);  // release: the slot is visible to whoever sees the phase complete
    if (w.end) return;
  }
}

// The CTA's t-th tile from the queue (w.end: none left). The caller releases the slot. (The wait's
// memory clobber keeps the read after it.)
template <typename Cfg, typename T>
__device__ __forceinline__ TileWork read_tile(Fa3Shared<Cfg, T>& sm, int t) {
  sm90::mbar_wait(&sm.tile_full, t & 1);
  return sm.tile_slot;
}

// The producer warpgroup's loop (one thread). With one Q buffer, K of a tile's first block goes out before
// its Q (whose buffer frees only after the previous tile's last Q K^T), so the next tile's first keys
// stream in while the consumers finish the previous tile. With two, Q goes first: its buffer was freed a
// tile earlier, so it loads while the previous tile still runs.
template <typename Cfg, typename T>
__device__ void producer_loop(Fa3Shared<Cfg, T>& sm, const Fa3Params& p) {
  int kv_iter = 0;
  for (int t = 0;; ++t) {
    const TileWork w = read_tile(sm, t);
    sm90::mbar_arrive(&sm.tile_empty);
    if (w.end) return;
    if (!w.valid || w.blocks() == 0) {
      skip_q(sm, t);
      continue;
    }
    if constexpr (Cfg::kQBuffers > 1) {
      load_q(sm, p, w, t);
      load_kv<false>(sm, p, w, w.n_last - 1, kv_iter);
    } else {
      load_kv<false>(sm, p, w, w.n_last - 1, kv_iter);
      load_q(sm, p, w, t);
    }
    load_kv<true>(sm, p, w, w.n_last - 1, kv_iter);
    ++kv_iter;
    for (int n = w.n_last - 2; n >= w.n_first; --n, ++kv_iter) {
      load_kv<false>(sm, p, w, n, kv_iter);
      load_kv<true>(sm, p, w, n, kv_iter);
    }
  }
}

// ---- consumer ---------------------------------------------------------------------------------------------

// Per-thread state of one consumer warpgroup for the current tile. Thread (warp w, lane l) holds rows
// 16w + l/4 ("half" 0) and 16w + l/4 + 8 (half 1) of the warpgroup's 64 rows; register i of an
// accumulator belongs to half (i >> 1) & 1 and column 8 * (i >> 2) + 2 * (l % 4) + (i & 1).
template <typename Cfg>
struct ConsumerState {
  float o[Cfg::kHeadDim / 2];  // unnormalized output
  float s[Cfg::kBlockN / 2];   // scores of the current block, then its probabilities (fp32)
  uint32_t p[Cfg::kBlockN / 4];  // probabilities of the block whose P V is next, packed 16-bit pairs
  float row_max[2];  // raw (unscaled) scores; -inf until a visible key is seen
  float row_sum[2];  // this thread's part of the running sum (quad-reduced in the epilogue)
};

__device__ __forceinline__ int acc_half(int i) { return (i >> 1) & 1; }
__device__ __forceinline__ int acc_col(int i) { return 8 * (i >> 2) + (i & 1); }  // plus 2 * (lane % 4)

// Everything a consumer needs to turn scores into probabilities, fixed for a tile.
struct SoftmaxParams {
  float mult;        // raw score -> log2 units: scale * log2(e), or log2(e) after the softcap
  float cap_inner;   // softcap: tanh(s * cap_inner) * cap; 0 when off
  float cap;
  int row0;  // this thread's half-0 row in the sequence
  // Visible keys of row row0 + 8 h: [key_begin[h], key_end[h]), formed once per tile (and only in a tile with
  // a masked block), so that a masked block does no mask arithmetic of its own.
  int key_begin[2], key_end[2];
};

// Softcap and mask of one block's raw scores, in place on st.s (the first steps of its softmax).
template <bool kMasked, typename Cfg>
__device__ __forceinline__ void prepare_scores(ConsumerState<Cfg>& st, const SoftmaxParams& sp, int key0,
                                               int quad) {
  constexpr int kN = Cfg::kBlockN / 2;
  if constexpr (Cfg::kSoftcap) {
    if (sp.cap_inner != 0.0f) {
#pragma unroll
      for (int i = 0; i < kN; ++i) st.s[i] = tanhf(st.s[i] * sp.cap_inner) * sp.cap;
    }
  }
  if constexpr (kMasked) {
    using Columns = core::ColumnMask<Cfg::kBlockN / 8>;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Visible columns relative to this thread's first column (key0 + 2 * quad), one bit each.
      const typename Columns::Word visible =
          Columns::visible(sp.key_begin[h] - key0 - 2 * quad, sp.key_end[h] - key0 - 2 * quad);
#pragma unroll
      for (int i = 0; i < kN; ++i) {
        if (acc_half(i) != h) continue;
        // Element i holds column acc_col(i) = 8 (i / 4) + i % 2.
        if (!((visible >> Columns::bit(i >> 2, i & 1)) & 1)) st.s[i] = core::kNegInf;
      }
    }
  }
}

// The block's probabilities in place, exp2(s * mult - base of the row half), and this thread's part of each
// row half's block sum. The scale is folded into the exponent: one FFMA and one MUFU exp2 per score.
template <typename Cfg>
__device__ __forceinline__ void exponentials(ConsumerState<Cfg>& st, float mult, const float (&base)[2],
                                             float (&tile_sum)[2]) {
  tile_sum[0] = tile_sum[1] = 0.0f;
#pragma unroll
  for (int i = 0; i < Cfg::kBlockN / 2; ++i) {
    st.s[i] = fast_exp2(fmaf(st.s[i], mult, -base[acc_half(i)]));
    tile_sum[acc_half(i)] += st.s[i];
  }
}

// Online softmax of one block's prepared scores (in place on st.s). Returns the factor that rescales O for
// each half and whether any row of the warp needs it.
//
// Conditional rescale: a row keeps its stored max until the block's max exceeds it by more than
// core::kRescaleThresholdLog2 (log2 units); until then probabilities may reach 2^8, which fp32 sums and
// the 16-bit P hold exactly as well, and the O rescale is skipped when no row of the warp moved its max.
template <typename Cfg>
__device__ __forceinline__ bool softmax_rows(ConsumerState<Cfg>& st, const SoftmaxParams& sp, float (&factor)[2]) {
  constexpr int kN = Cfg::kBlockN / 2;
  float tile_max[2] = {core::kNegInf, core::kNegInf};
#pragma unroll
  for (int i = 0; i < kN; ++i) tile_max[acc_half(i)] = fmaxf(tile_max[acc_half(i)], st.s[i]);
  float base[2];
  bool moved = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float block_max = quad_max(tile_max[h]);
    const float old_max = st.row_max[h];
    // Also true for the first visible block (old max -inf); never for a row that is still fully masked.
    const bool move = (block_max - old_max) * sp.mult > core::kRescaleThresholdLog2;
    const float new_max = move ? block_max : old_max;
    // A row that has seen only masked keys keeps max -inf: subtract 0 so exp2(-inf) stays 0, not NaN.
    base[h] = new_max == core::kNegInf ? 0.0f : new_max * sp.mult;
    factor[h] = move ? fast_exp2(old_max * sp.mult - base[h]) : 1.0f;
    st.row_max[h] = new_max;
    moved = moved || move;
  }
  float tile_sum[2];
  exponentials(st, sp.mult, base, tile_sum);
#pragma unroll
  for (int h = 0; h < 2; ++h) st.row_sum[h] = st.row_sum[h] * factor[h] + tile_sum[h];
  return __any_sync(0xffffffffu, moved);
}

// The whole softmax of one block: prepare_scores, then softmax_rows.
template <bool kMasked, typename Cfg>
__device__ __forceinline__ bool softmax_block(ConsumerState<Cfg>& st, const SoftmaxParams& sp, int key0, int quad,
                                              float (&factor)[2]) {
  prepare_scores<kMasked>(st, sp, key0, quad);
  return softmax_rows(st, sp, factor);
}

// The fast form of softmax_rows for a main-loop block (Cfg::kStaleMax): the exponentials against the rows'
// stored max as it stands, with no block max, the max's 32-deep FMNMX chain per row half and its shuffles
// off the softmax's critical path. It holds where softmax_rows would not move the max: then every
// probability is at most 2^8, so each thread's part of a row's block sum is at most 2^8. Conversely, parts
// within 2^8 bound every probability by 2^8, the bound the conditional rescale keeps anyway, so the block
// is done with factor 1 (as softmax_rows' would be, but for a probability within rounding of 2^8). Returns
// false, leaving st.s without use, where a part exceeds 2^8 for any row of the warp: a score more than ~8
// log2 units above the stored max, an overflow to inf, a NaN (a row with no max yet: -inf stored), which the
// comparison also rejects. Warp-uniform.
template <typename Cfg>
__device__ __forceinline__ bool softmax_rows_stale(ConsumerState<Cfg>& st, const SoftmaxParams& sp) {
  static_assert(core::kRescaleThresholdLog2 == 8.0f, "kBound is 2^kRescaleThresholdLog2");
  constexpr float kBound = 256.0f;
  const float base[2] = {st.row_max[0] * sp.mult, st.row_max[1] * sp.mult};
  float tile_sum[2];
  exponentials(st, sp.mult, base, tile_sum);
  if (!__all_sync(0xffffffffu, tile_sum[0] <= kBound && tile_sum[1] <= kBound)) return false;
#pragma unroll
  for (int h = 0; h < 2; ++h) st.row_sum[h] += tile_sum[h];
  return true;
}

// Element offset of the 16-byte chunk (row r, columns c .. c + 7, c a multiple of 8) in a K-major
// tile of kRows rows as TMA's 128-byte swizzle stores it: 64-column blocks of kRows x 128 bytes, each the
// XOR-swizzled rows of cuda/common/smem_swizzle.cuh (the tile starts on a 1024-byte boundary).
template <int kRows>
__device__ __forceinline__ int swizzled_chunk(int r, int c) {
  return (c / sm90::kSwizzleElems) * kRows * sm90::kSwizzleElems +
         swizzled_chunk_offset<sm90::kSwizzleElems>(r, (c % sm90::kSwizzleElems) / kSwizzleChunkElems);
}

template <typename Cfg>
__device__ __forceinline__ void rescale_o(ConsumerState<Cfg>& st, const float (&factor)[2]) {
#pragma unroll
  for (int i = 0; i < Cfg::kHeadDim / 2; ++i) st.o[i] *= factor[acc_half(i)];
}

template <typename Cfg, typename T>
__device__ __forceinline__ void pack_p(ConsumerState<Cfg>& st) {
  // Accumulator registers 2m, 2m + 1 are exactly A register m of P V (see sm90_ptx.cuh).
#pragma unroll
  for (int m = 0; m < Cfg::kBlockN / 4; ++m) st.p[m] = pack2<T>(st.s[2 * m], st.s[2 * m + 1]);
}

// S = Q K^T for this warpgroup's 64 rows against the kBlockN keys of one stage.
template <typename Cfg, typename T>
__device__ __forceinline__ void issue_qk(ConsumerState<Cfg>& st, const T* sq_rows, const T* sk) {
  const uint32_t q_addr = sm90::smem_u32(sq_rows);
  const uint32_t k_addr = sm90::smem_u32(sk);
  constexpr uint32_t kLbo = 16;  // unused by swizzled K-major operands
#pragma unroll
  for (int kk = 0; kk < Cfg::kQkSteps; ++kk) {
    // k16 step kk: column block kk / 4, 32 bytes per step inside the 128-byte swizzled row.
    const uint32_t q_off = (kk / 4) * Cfg::kBlockM * sm90::kSwizzleBytes + (kk % 4) * 32;
    const uint32_t k_off = (kk / 4) * Cfg::kBlockN * sm90::kSwizzleBytes + (kk % 4) * 32;
    sm90::wgmma_ss<Cfg::kBlockN, T, 0>(st.s, sm90::make_smem_desc(q_addr + q_off, kLbo, sm90::kSwizzleAtomBytes),
                                       sm90::make_smem_desc(k_addr + k_off, kLbo, sm90::kSwizzleAtomBytes), kk > 0);
  }
}

// O += P V with P from registers; V[keys, d] is an MN-major B operand: 64-column blocks of d are
// kBlockN * 128 bytes apart (LBO), 8-key groups 1024 bytes apart (SBO), 16 keys per step = 2048 bytes.
template <typename Cfg, typename T>
__device__ __forceinline__ void issue_pv(ConsumerState<Cfg>& st, const T* sv) {
  const uint32_t v_addr = sm90::smem_u32(sv);
  constexpr uint32_t kLbo = Cfg::kBlockN * sm90::kSwizzleBytes;
#pragma unroll
  for (int kk = 0; kk < Cfg::kPvSteps; ++kk) {
    const uint32_t a[4] = {st.p[4 * kk], st.p[4 * kk + 1], st.p[4 * kk + 2], st.p[4 * kk + 3]};
    sm90::wgmma_rs<Cfg::kHeadDim, T, 1>(
        st.o, a, sm90::make_smem_desc(v_addr + kk * 16 * sm90::kSwizzleBytes, kLbo, sm90::kSwizzleAtomBytes), true);
  }
}

// Ping-pong turn: wait for ours before issuing GEMMs, hand it to the next consumer after. Each barrier
// sees exactly one arrive (from the previous consumer) per sync, so turns strictly rotate.
template <typename Cfg>
__device__ __forceinline__ void take_turn(int wg) {
  if constexpr (Cfg::kPingPong) sm90::named_sync(kTurnBarrier + wg, kTurnThreads);
}
template <typename Cfg>
__device__ __forceinline__ void pass_turn(int wg) {
  if constexpr (Cfg::kPingPong)
    sm90::named_arrive(kTurnBarrier + (wg + 1) % Cfg::kConsumerWarpgroups, kTurnThreads);
}

// Where a consumer thread's part of a finished tile goes (Consumer::tile_end), kept for the epilogue, which
// may run after the next tile has started (kDeferEpilogue).
template <typename T>
struct TileEnd {
  T* out;         // the thread's first 16-byte chunk of O (epilogue's read-back row and chunk)
  float* lse;     // the LSE of the thread's half-0 row; nullptr when not requested
  int rows_left;  // rows of the tile from the thread's first O row on (the rest of the sequence)
  int lse_rows;   // the same from its half-0 row
  float mult;     // raw score -> log2 units
  // Cfg::kPackGqa: out and lse point at row 0 of the tile's (batch, head) (out: plus the lane's chunk), and
  // these are the tile rows of the thread's first O row and of its half-0 row (Consumer::row_offset).
  int row, lse_row;
};

template <typename Cfg, typename T>
struct Consumer {
  Fa3Shared<Cfg, T>& sm;
  const Fa3Params& p;
  int wg;   // consumer index, 0 .. kConsumerWarpgroups - 1
  int tid;  // thread in the warpgroup
  int kv_iter = 0;
  int qbuf = 0;  // the current tile's Q buffer (q_buffer)

  __device__ int lane() const { return tid % 32; }
  __device__ int warp() const { return tid / 32; }  // in the warpgroup
  // Without warp specialization: the thread that issues the loads (re-derived, not held in a register).
  __device__ bool is_loader() const { return !Cfg::kWarpSpecialized && wg == 0 && tid == 0; }
  __device__ int quad() const { return tid % 4; }
  __device__ int local_row0() const { return wg * Cfg::kRowsPerWarpgroup + warp() * 16 + lane() / 4; }
  // The query token of tile row r (Cfg::kPackGqa: r / G), which the mask goes by.
  __device__ int token(int r) const {
    if constexpr (Cfg::kPackGqa) return r / p.pack_group;
    return r;
  }
  // Elements from row 0 of the tile's (batch, head) in out or lse (out_rows, lse_rows) to tile row r: r
  // row strides, or with Cfg::kPackGqa token r / G's row of query head r % G of the group.
  __device__ int64_t row_offset(int r, int64_t row_stride, int64_t head_stride) const {
    if constexpr (Cfg::kPackGqa) return int64_t(r / p.pack_group) * row_stride + int64_t(r % p.pack_group) * head_stride;
    return int64_t(r) * row_stride;
  }

  // Without a producer warpgroup: the load for ring position `iter` (block index `idx` of the tile) is
  // issued once the buffer it overwrites is released, by the loader thread in line with its own work.
  __device__ void refill_k(const TileWork& w, int idx, int iter) {
    if (is_loader() && idx < w.blocks()) load_kv<false>(sm, p, w, w.n_last - 1 - idx, iter);
  }
  __device__ void refill_v(const TileWork& w, int idx, int iter) {
    if (is_loader() && idx < w.blocks()) load_kv<true>(sm, p, w, w.n_last - 1 - idx, iter);
  }

  // The CTA's t-th tile: from the scheduler's queue, or the static schedule without a producer warpgroup.
  __device__ TileWork take_tile(int t) {
    if constexpr (!Cfg::kWarpSpecialized) {
      return make_tile<Cfg>(p, int(blockIdx.x) + t * int(gridDim.x));
    } else {
      const TileWork w = read_tile(sm, t);
      sm90::mbar_arrive(&sm.tile_empty);  // every reading thread releases its own read (once per tile)
      return w;
    }
  }

  __device__ void wait_k(int iter) { sm90::mbar_wait(&sm.k_full[iter % Cfg::kStages], (iter / Cfg::kStages) & 1); }
  __device__ void wait_v(int iter) { sm90::mbar_wait(&sm.v_full[iter % Cfg::kStages], (iter / Cfg::kStages) & 1); }
  // V: one arrival per warpgroup, after its wgmma_wait: a wgmma is one operation of the whole warpgroup, so
  // once it has completed for this thread it has finished reading the stage for all four warps. K: one
  // arrival per warp, since a warp may read the stage again on its own after its Q K^T (recompute_scores).
  __device__ void release_k(int iter) {
    if (lane() == 0) sm90::mbar_arrive(&sm.k_empty[iter % Cfg::kStages]);
  }
  __device__ void release_v(int iter) {
    if (tid == 0) sm90::mbar_arrive(&sm.v_empty[iter % Cfg::kStages]);
  }
  // Block `idx`'s K stage (ring position `iter`) is done with: released, and refilled by the loader thread
  // without a producer warpgroup.
  __device__ void free_k(const TileWork& w, int idx, int iter) {
    release_k(iter);
    refill_k(w, idx + Cfg::kStages, iter + Cfg::kStages);
  }
  // The warpgroup's P V has completed: O is settled and P's registers are free.
  __device__ static void wait_pv(ConsumerState<Cfg>& st) {
    sm90::wgmma_wait<0>();
    sm90::fence_registers(st.o);
  }

  // This warp's 16 rows of the block's raw scores S = Q K^T again, into st.s, with mma.sync from the Q and K
  // tiles in shared memory (the slow path after softmax_rows_stale): a warp's part of an m64nN wgmma
  // accumulator is, register for register, the m16n8 accumulator of each 8-key column group. The same
  // products as issue_qk's, summed in another order. The warp releases the K stage and the Q buffer only
  // after this (release_k, release_q arrive per warp).
  __device__ void recompute_scores(ConsumerState<Cfg>& st, int iter) const {
    const T* q = sm.q[qbuf];
    const T* k = sm.k[iter % Cfg::kStages];
    // With the slow path after the P V wait (Cfg::kStaleSlowAfterPv), the thread's index read afresh: a
    // volatile read stays in this rare path, so nothing derived from it is hoisted out and held in a register
    // across the main loop (the three-consumer head-dim-64 kernels spilled 4-8 bytes without it). The
    // two-consumer head-dim-64 kernels keep the form they were measured with.
    uint32_t thread = 0;
    if constexpr (Cfg::kStaleSlowAfterPv) asm volatile("mov.u32 %0, %%tid.x;" : "=r"(thread));
    const int l = Cfg::kStaleSlowAfterPv ? int(thread % 32) : lane();
    const int warp_index = Cfg::kStaleSlowAfterPv ? int(thread / 32 % sm90::kWarpgroupWarps) : warp();
    // ldmatrix rows: A (x4), rows l % 8 + 8 ((l / 8) % 2) at column 8 (l / 16) of each k16 step; B (x2, lanes
    // 0-15), key l % 8 of each 8-key group at column 8 ((l / 8) % 2).
    const int q_row = wg * Cfg::kRowsPerWarpgroup + warp_index * 16 + l % 8 + 8 * ((l / 8) % 2);
#pragma unroll
    for (int i = 0; i < Cfg::kBlockN / 2; ++i) st.s[i] = 0.0f;
#pragma unroll 1  // a rare path: kept short and light on registers
    for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, q + swizzled_chunk<Cfg::kBlockM>(q_row, 16 * kk + 8 * (l / 16)));
#pragma unroll
      for (int j = 0; j < Cfg::kBlockN / 8; ++j) {
        uint32_t b[2];
        ldmatrix_x2(b, k + swizzled_chunk<Cfg::kBlockN>(8 * j + l % 8, 16 * kk + 8 * ((l / 8) % 2)));
        float c[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) c[r] = st.s[4 * j + r];
        mma_16816<T>(c, a, b);
#pragma unroll
        for (int r = 0; r < 4; ++r) st.s[4 * j + r] = c[r];
      }
    }
  }

  // The slow path of the stored-max softmax (P V waited for): the warp's scores again, softcap and mask, and
  // the full softmax. Returns whether any row of the warp moved its max (factor: the O rescale).
  template <bool kMasked>
  __device__ bool softmax_recomputed(ConsumerState<Cfg>& st, const SoftmaxParams& sp, int key0, int iter,
                                     float (&factor)[2]) const {
    recompute_scores(st, iter);
    prepare_scores<kMasked>(st, sp, key0, quad());
    return softmax_rows(st, sp, factor);
  }

  __device__ void qk(ConsumerState<Cfg>& st, int iter) {
    sm90::fence_registers(st.s);
    sm90::wgmma_fence();
    issue_qk<Cfg, T>(st, sm.q[qbuf] + wg * Cfg::kRowsPerWarpgroup * sm90::kSwizzleElems, sm.k[iter % Cfg::kStages]);
    sm90::wgmma_commit();
  }
  __device__ void pv(ConsumerState<Cfg>& st, int iter) {
    sm90::fence_registers(st.o);
    sm90::fence_registers(st.p);
    sm90::wgmma_fence();
    issue_pv<Cfg, T>(st, sm.v[iter % Cfg::kStages]);
    sm90::wgmma_commit();
  }

  // The tile's first block (KV block n_last - 1, ring position `iter`): Q K^T only, its P V runs with the
  // next block's Q K^T. It takes the per-element mask unless every row sees all of its keys (the causal
  // diagonal and the end of the keys fall in it whenever they fall in the tile; without a mask and with
  // seqlen_k a multiple of kBlockN it needs none). Peeled from the loop so that every loop iteration has the
  // same wgmma groups in flight (ptxas serializes wgmma when it cannot prove which group a register read
  // waits for).
  //
  // The state of the previous tile is still in `st` when this runs: with kDeferEpilogue its epilogue runs
  // here, after this tile's first Q K^T is issued and before it is waited for, so the tensor cores work
  // under it (`pending`: there is such a tile; `prev`: where its rows go). Then O and the row statistics
  // start over.
  //
  // `idx` > 0 where the warpgroup has passed over the tile's first blocks (Cfg::kLeadSkip): its first block
  // is then block idx of the tile.
  // Consumer::run spells these steps out instead where Cfg::kFirstBlockOnce: compiled once, only the softmax
  // in both forms. (Not by splitting this function in two: split, the other kernels, head dim 64's among
  // them, compiled to other code than was measured.)
  template <bool kMasked>
  __device__ void first_block(ConsumerState<Cfg>& st, const SoftmaxParams& sp, const TileWork& w, int idx,
                              int iter, bool pending, const TileEnd<T>& prev) {
    qk_issue(st, iter);
    if constexpr (Cfg::kDeferEpilogue) {
      if (pending) epilogue(st, prev);
    }
    reset_state(st);
    qk_complete(st, w, idx, iter);
    float factor[2];
    // O is still 0: no rescale.
    softmax_block<kMasked>(st, sp, (w.n_last - 1 - idx) * Cfg::kBlockN, quad(), factor);
    pack_p<Cfg, T>(st);
    if constexpr (!Cfg::kIntraOverlap) pv_now(st, w, idx, iter);
  }

  // Q K^T (or P V) of block `idx` on its own: wait for the operand, issue in turn, wait, release.
  __device__ void qk_now(ConsumerState<Cfg>& st, const TileWork& w, int idx, int iter) {
    qk_issue(st, iter);
    qk_complete(st, w, idx, iter);
  }
  __device__ void qk_issue(ConsumerState<Cfg>& st, int iter) {
    wait_k(iter);
    take_turn<Cfg>(wg);
    qk(st, iter);
    pass_turn<Cfg>(wg);
  }
  __device__ void qk_complete(ConsumerState<Cfg>& st, const TileWork& w, int idx, int iter) {
    sm90::wgmma_wait<0>();
    sm90::fence_registers(st.s);
    free_k(w, idx, iter);
  }

  __device__ void pv_now(ConsumerState<Cfg>& st, const TileWork& w, int idx, int iter) {
    wait_v(iter);
    take_turn<Cfg>(wg);
    pv(st, iter);
    pass_turn<Cfg>(wg);
    wait_pv(st);
    release_v(iter);
    refill_v(w, idx + Cfg::kStages, iter + Cfg::kStages);
  }

  // Block `idx` > 0 of the tile (KV block n = n_last - 1 - idx) at ring position `iter`.
  template <bool kMasked>
  __device__ void block(ConsumerState<Cfg>& st, const SoftmaxParams& sp, const TileWork& w, int idx, int iter) {
    const int key0 = (w.n_last - 1 - idx) * Cfg::kBlockN;
    float factor[2];
    if constexpr (Cfg::kIntraOverlap) {
      wait_k(iter);
      wait_v(iter - 1);
      take_turn<Cfg>(wg);
      qk(st, iter);
      pv(st, iter - 1);
      pass_turn<Cfg>(wg);
      sm90::wgmma_wait<1>();  // S of this block is ready; P V of the previous one may still run
      sm90::fence_registers(st.s);
      constexpr bool kStale = kMasked ? Cfg::kStaleMaxMasked : Cfg::kStaleMax;  // the stored-max softmax
      if constexpr (!kStale) free_k(w, idx, iter);  // the K stage is done with (with kStaleMax: after the softmax)
      prepare_scores<kMasked>(st, sp, key0, quad());
      if constexpr (kStale && Cfg::kStaleSlowAfterPv) {
        // Both arms wait for P V (see below); the slow one then recomputes the scores, with P's registers
        // free and O no longer in flight, and runs the full softmax with its rescale. (Warp-uniform, as the
        // rescale branch below: see the wait's note there.)
        if (softmax_rows_stale(st, sp)) {
          wait_pv(st);
        } else {
          wait_pv(st);
          if (softmax_recomputed<kMasked>(st, sp, key0, iter, factor)) rescale_o(st, factor);
        }
        free_k(w, idx, iter);  // after the softmax: its slow path reads the stage again
      } else {
        bool moved = false;
        if constexpr (kStale) {
          // The slow path ahead of the P V wait below: it waits for P V itself, which frees P's registers
          // for the recomputation.
          if (!softmax_rows_stale(st, sp)) {
            wait_pv(st);
            moved = softmax_recomputed<kMasked>(st, sp, key0, iter, factor);
          }
          free_k(w, idx, iter);  // after the softmax: its slow path reads the stage again
        } else {
          moved = softmax_rows(st, sp, factor);
        }
        // The wait for P V sits in both arms of the branch on purpose: in one basic block with the softmax,
        // ptxas scheduled the WARPGROUP.DEPBAR above the softmax, which then ran only after P V had finished
        // (seen in the SASS and in the profile: 15% of the stall samples on that DEPBAR). The branch keeps
        // it after the last exponential; scripts/ncu_profile.sh and the SASS check in gpu_check.sh show it.
        // (Its condition is a warp vote: the wait is warp-uniform, not warpgroup-uniform as PTX asks of
        // wgmma.wait_group; in SASS it is WARPGROUP.DEPBAR, a wait of the executing warp.)
        if (moved) {
          wait_pv(st);
          rescale_o(st, factor);
        } else {
          wait_pv(st);
        }
      }
      release_v(iter - 1);
      refill_v(w, idx - 1 + Cfg::kStages, iter - 1 + Cfg::kStages);
      pack_p<Cfg, T>(st);
    } else {
      qk_now(st, w, idx, iter);
      if (softmax_block<kMasked>(st, sp, key0, quad(), factor)) rescale_o(st, factor);
      pack_p<Cfg, T>(st);
      pv_now(st, w, idx, iter);
    }
  }

  // The P V of the tile's last block, still pending under intra-warpgroup overlap.
  __device__ void drain(ConsumerState<Cfg>& st, const TileWork& w, int idx, int iter) {
    if constexpr (Cfg::kIntraOverlap) pv_now(st, w, idx, iter);
  }

  // A ping-pong turn taken and passed at once (no GEMM issued in it).
  __device__ void idle_turn() const {
    take_turn<Cfg>(wg);
    pass_turn<Cfg>(wg);
  }

  // Blocks [0, count) of a tile at ring positions base.. without GEMMs or softmax, for a warpgroup that has
  // no rows in the tile (idle_tile) or none that sees those blocks' keys (Cfg::kLeadSkip): every step of
  // first_block and block, the previous tile's deferred epilogue (`pending`, `prev`) after the first turn,
  // as first_block runs it. Each turn is taken and passed where the working consumers take theirs, so the
  // rotation stays in step. Each K and V stage is waited for by all four warps before it is released: the
  // warpgroup must never arrive on a stage's empty barrier while one of its warps has yet to pass the wait on
  // that stage's full barrier, or the producer could refill the stage and the late warp then wait on a parity
  // that comes round again only a whole ring later (in the working path the wgmma keeps the warps together;
  // here sync_warpgroup does, as for a tile without keys). The V stage of block count - 1 is left to the
  // caller (its P V belongs to the next turn). Only kernels with intra-warpgroup overlap have these paths
  // (Cfg::kIdleRows, Cfg::kLeadSkip).
  __device__ void idle_blocks(ConsumerState<Cfg>& st, int base, int count, bool pending, const TileEnd<T>& prev) {
    static_assert(Cfg::kIntraOverlap, "the idle paths follow the overlapped block's turns");
    wait_k(base);  // first_block: Q K^T
    idle_turn();
    if constexpr (Cfg::kDeferEpilogue) {
      if (pending) epilogue(st, prev);
    }
    sync_warpgroup();
    release_k(base);
    for (int idx = 1; idx < count; ++idx) {  // Q K^T of this block and P V of the previous one in one turn
      const int iter = base + idx;
      wait_k(iter);
      wait_v(iter - 1);
      idle_turn();
      sync_warpgroup();
      release_k(iter);
      release_v(iter - 1);
    }
  }

  // A tile in which this warpgroup has no rows (Cfg::kIdleRows): idle_blocks over all of its blocks and an
  // idle drain (the last P V's turn). The caller has waited for the tile's Q buffer and releases it after.
  __device__ void idle_tile(ConsumerState<Cfg>& st, const TileWork& w, int base, bool pending,
                            const TileEnd<T>& prev) {
    const int blocks = w.blocks();
    idle_blocks(st, base, blocks, pending, prev);
    wait_v(base + blocks - 1);  // drain: the last P V
    idle_turn();
    sync_warpgroup();
    release_v(base + blocks - 1);
  }

  // The tile's first blocks that no row of this warpgroup sees (Cfg::kLeadSkip), passed over as idle_blocks
  // does; the V stage of the last of them is released here, its turn being first_block's. Blocks from
  // MaskSpec32::blocks_seen_up_to(its last row) on are masked for all of its rows; at least one block is
  // left, so that a row that sees no key at all still goes through the softmax of a masked block.
  // Warp-uniform by the broadcast.
  __device__ int lead_blocks(const TileWork& w, const core::MaskSpec32& mask) const {
    const int rows_end = min(w.row_begin + (wg + 1) * Cfg::kRowsPerWarpgroup, w.len_q);
    const int own_last = mask.blocks_seen_up_to(token(rows_end - 1), Cfg::kBlockN);
    const int lead = min(max(w.n_last - own_last, 0), w.blocks() - 1);
    return __shfl_sync(0xffffffffu, lead, 0);
  }
  __device__ void skip_lead(ConsumerState<Cfg>& st, int base, int lead, bool pending, const TileEnd<T>& prev) {
    idle_blocks(st, base, lead, pending, prev);
    wait_v(base + lead - 1);
    sync_warpgroup();
    release_v(base + lead - 1);
  }

  // Row 0 of the sequence of the tile's (batch, head) in out and in lse (nullptr: lse not requested); row r
  // is r row strides further. Computed once per tile: the offsets of a varlen batch are loads.
  __device__ T* out_rows(const TileWork& w) const {
    const AttnParams& a = p.attn;
    return static_cast<T*>(a.out.ptr) + w.batch * a.out.batch_stride + w.head * a.out.head_stride +
           int64_t(a.q_offset(w.batch)) * a.out.row_stride;
  }
  __device__ float* lse_rows(const TileWork& w) const {
    const AttnParams& a = p.attn;
    if (a.lse.ptr == nullptr) return nullptr;
    return static_cast<float*>(a.lse.ptr) + w.batch * a.lse.batch_stride + w.head * a.lse.head_stride +
           int64_t(a.q_offset(w.batch)) * a.lse.row_stride;
  }

  __device__ void write_empty_rows(const TileWork& w) {
    // Rows that see no key: O = 0 and LSE = -inf, as the reference defines them.
    const int chunks = (Cfg::kPartialCols ? p.attn.head_dim : Cfg::kHeadDim) / 8;
    const int64_t out_stride = p.attn.out.row_stride;
    T* out = out_rows(w);
    for (int idx = tid; idx < Cfg::kRowsPerWarpgroup * chunks; idx += kWarpgroupThreads) {
      const int row = w.row_begin + wg * Cfg::kRowsPerWarpgroup + idx / chunks;
      if (row < w.len_q)
        *reinterpret_cast<uint4*>(out + row_offset(row, out_stride, p.attn.out.head_stride) + (idx % chunks) * 8) =
            make_uint4(0, 0, 0, 0);
    }
    float* lse = lse_rows(w);
    if (lse != nullptr && tid < Cfg::kRowsPerWarpgroup) {
      const int row = w.row_begin + wg * Cfg::kRowsPerWarpgroup + tid;
      if (row < w.len_q) lse[row_offset(row, p.attn.lse.row_stride, p.attn.lse.head_stride)] = core::kNegInf;
    }
  }

  // The tile's Q buffer is free once this warpgroup's last Q K^T of the tile has completed (the caller
  // waited for it) and, with Cfg::kStaleMax, once each warp's last softmax has (its slow path reads Q
  // again, recompute_scores): the producer can load a later tile's Q into it. One arrival per warp, as for
  // the K stages. Hazard: an arrival must never come from a warp for another that has yet to pass its wait
  // on the buffer's q_full for this tile, or the warp left behind could see the buffer's next phase complete
  // too and then wait on an aliased parity forever. Each warp arriving for itself rules that out; the paths
  // of a tile without keys still meet at a warpgroup barrier first (sync_warpgroup), as they did when one
  // thread arrived for the warpgroup. (Without it, an earlier version that took the next tile before the
  // epilogue let a warp run two phases ahead: Fa3Forward.TileChangesAcrossManyTilesPerCta hung,
  // FLASHATTN_MBAR_WATCHDOG named q_full.)
  __device__ void release_q() {
    if (lane() == 0) sm90::mbar_arrive(&sm.q_empty[qbuf]);
  }
  // The warpgroup's own named barrier (after the consumers' turn barriers).
  __device__ void sync_warpgroup() const {
    sm90::named_sync(kTurnBarrier + Cfg::kConsumerWarpgroups + wg, kWarpgroupThreads);
  }

  // O = 0 and fresh row statistics for a new tile.
  __device__ static void reset_state(ConsumerState<Cfg>& st) {
#pragma unroll
    for (int i = 0; i < Cfg::kHeadDim / 2; ++i) st.o[i] = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      st.row_max[h] = core::kNegInf;
      st.row_sum[h] = 0.0f;
    }
  }

  // Where this thread's rows of tile w go (epilogue's read-back mapping: lane l stores chunk l % 8 of rows
  // l / 8 + 4 i of its warp's 16).
  // w is the CTA's t-th tile; with Cfg::kSetupFromScheduler its rows' start comes from the scheduler's setup.
  __device__ TileEnd<T> tile_end(const TileWork& w, const SoftmaxParams& sp, int t) const {
    if constexpr (Cfg::kSetupFromScheduler) {
      const TileSetup& s = sm.tile_setup[t & 1];
      const AttnParams& a = p.attn;
      return tile_end(w, sp, static_cast<T*>(a.out.ptr) + s.out_off,
                      a.lse.ptr == nullptr ? nullptr : static_cast<float*>(a.lse.ptr) + s.lse_off);
    } else {
      return tile_end(w, sp, out_rows(w), lse_rows(w));
    }
  }
  // The same from the rows of the tile's (batch, head) in out and lse (out_rows, lse_rows).
  __device__ TileEnd<T> tile_end(const TileWork& w, const SoftmaxParams& sp, T* out, float* lse) const {
    TileEnd<T> e;
    const int first_row = sp.row0 - lane() / 4;  // the warp's first row
    if constexpr (Cfg::kPackGqa) {
      e.out = out + (lane() % 8) * 8;
      e.row = first_row + lane() / 8;
      e.rows_left = w.len_q - first_row - lane() / 8;
      e.lse = lse;
      e.lse_row = sp.row0;
    } else {
      e.out = out + int64_t(first_row + lane() / 8) * p.attn.out.row_stride + (lane() % 8) * 8;
      e.rows_left = w.len_q - first_row - lane() / 8;
      e.lse = lse == nullptr ? nullptr : lse + int64_t(sp.row0) * p.attn.lse.row_stride;
    }
    e.lse_rows = w.len_q - sp.row0;
    e.mult = sp.mult;
    return e;
  }

  // O / l and the LSE. The Q buffer is already loading the next tile, so each warp stages its 16 rows of O in
  // a shared buffer of its own, one 64-column block at a time: stmatrix takes the accumulator pairs as they
  // are (four 8 x 8 matrices per 16 x 16 block), then every lane reads whole 16-byte chunks back, eight
  // lanes per 128-byte row segment, and stores them (predicated on the row, no branch). The row pointer is
  // worked out once per thread. (Before: a 4 x 4 register transpose by shuffles per quad, 12 selects and 4
  // shuffles per 16-byte store, and the compiler rebuilt the 64-bit address inside each store's branch.)
  __device__ void epilogue(ConsumerState<Cfg>& st, const TileEnd<T>& e) {
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sum = quad_sum(st.row_sum[h]);
      inv[h] = sum > 0.0f ? 1.0f / sum : 0.0f;
      if (e.lse != nullptr && quad() == 0 && 8 * h < e.lse_rows)
        e.lse[Cfg::kPackGqa ? row_offset(e.lse_row + 8 * h, p.attn.lse.row_stride, p.attn.lse.head_stride)
                            : 8 * h * p.attn.lse.row_stride] =
            sum > 0.0f ? (st.row_max[h] * e.mult + __log2f(sum)) * core::kLn2 : core::kNegInf;
    }
    const T* staged = sm.o_stage[wg * sm90::kWarpgroupWarps + warp()];
    const uint32_t stage = sm90::smem_u32(staged);
    constexpr int kRowBytes = sm90::kSwizzleBytes;  // one staged row: 64 columns
    // stmatrix: lane l addresses row l % 8 of matrix l / 8; matrices 0, 1 are rows 0-7, 8-15 of the left n8
    // block of a 16 x 16 block, 2, 3 the same of the right one.
    const int st_row = lane() % 8 + 8 * ((lane() / 8) % 2);
    const int st_half = lane() / 16;
    // Read-back: lane l takes chunk l % 8 of rows l / 8 + 4 i (tile_end has its address).
    const int rd_row = lane() / 8, rd_chunk = lane() % 8;
    const int64_t out_stride = p.attn.out.row_stride;
    T* dst = e.out;
    const int rows_left = e.rows_left;
    // kPartialCols: the problem's columns from this lane's chunk on (its chunks past the head dim are not
    // stored: the row's next elements belong to another row or tensor).
    const int cols_left = Cfg::kPartialCols ? p.attn.head_dim - rd_chunk * 8 : Cfg::kHeadDim;
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = 4 * (8 * cb + 2 * k);  // accumulators of n8 block 8 cb + 2 k: i .. i + 3, then i + 4 .. i + 7
        const int chunk = 2 * k + st_half;
        sm90::stmatrix_x4(stage + st_row * kRowBytes + ((chunk ^ (st_row % 8)) * 16),
                          pack2<T>(st.o[i] * inv[0], st.o[i + 1] * inv[0]),
                          pack2<T>(st.o[i + 2] * inv[1], st.o[i + 3] * inv[1]),
                          pack2<T>(st.o[i + 4] * inv[0], st.o[i + 5] * inv[0]),
                          pack2<T>(st.o[i + 6] * inv[1], st.o[i + 7] * inv[1]));
      }
      __syncwarp();  // the warp's stmatrix writes are visible to its lanes' reads
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = rd_row + 4 * r;
        const uint4 v =
            *reinterpret_cast<const uint4*>(staged + row * sm90::kSwizzleElems + (rd_chunk ^ (row % 8)) * 8);
        const bool col_in = !Cfg::kPartialCols || cb * sm90::kSwizzleElems < cols_left;
        T* row_dst = Cfg::kPackGqa ? dst + row_offset(e.row + 4 * r, out_stride, p.attn.out.head_stride)
                                   : dst + 4 * r * out_stride;
        store_global_16_if(col_in && 4 * r < rows_left, row_dst + cb * sm90::kSwizzleElems, v);
      }
      __syncwarp();  // every lane has read the block before the next one overwrites it
    }
  }

  __device__ void run() {
    const AttnParams& a = p.attn;
    // Consumer 0 goes first: the last consumer hands it the first turn.
    if (Cfg::kPingPong && wg == Cfg::kConsumerWarpgroups - 1) sm90::named_arrive(kTurnBarrier + 0, kTurnThreads);
    ConsumerState<Cfg> st;
    // kDeferEpilogue: the previous tile's O, still in st, waits for its epilogue (pending), which runs under
    // the next tile's first Q K^T (first_block), before a tile without keys, or after the last tile.
    bool pending = false;
    TileEnd<T> prev{};
    for (int t = 0;; ++t) {
      const TileWork w = take_tile(t);
      if (w.end) break;
      qbuf = q_buffer<Cfg>(t);
      if (!w.valid || w.blocks() == 0) {  // its Q phase carries no data (skip_q)
        if (Cfg::kDeferEpilogue && pending) epilogue(st, prev);
        pending = false;
        if (is_loader()) skip_q(sm, t);
        sm90::mbar_wait(&sm.q_full[qbuf], q_phase<Cfg>(t));
        if (w.valid) write_empty_rows(w);
        sync_warpgroup();  // every warp has passed the wait above before the buffer is released (release_q)
        release_q();
        continue;
      }
      // (Broadcast from lane 0: the same for the whole warpgroup, and ptxas must see it warp-uniform, or it
      // serializes every wgmma of the kernel, C7518.)
      if constexpr (Cfg::kIdleRows) {
        if (__shfl_sync(0xffffffffu, int(w.row_begin + wg * Cfg::kRowsPerWarpgroup >= w.len_q), 0)) {
          // No rows of this warpgroup in the tile: nothing to compute or write (the previous tile's deferred
          // epilogue still runs, inside idle_tile). The warps have met (idle_tile ends on sync_warpgroup)
          // before the Q buffer is released, as for a tile without keys.
          sm90::mbar_wait(&sm.q_full[qbuf], q_phase<Cfg>(t));
          idle_tile(st, w, kv_iter, pending, prev);
          pending = false;
          kv_iter += w.blocks();
          release_q();
          continue;
        }
      }
      if (is_loader()) {
        load_q(sm, p, w, t);
        for (int i = 0; i < Cfg::kStages && i < w.blocks(); ++i) {
          load_kv<false>(sm, p, w, w.n_last - 1 - i, kv_iter + i);
          load_kv<true>(sm, p, w, w.n_last - 1 - i, kv_iter + i);
        }
      }
      SoftmaxParams sp;
      sp.cap = a.softcap;
      sp.cap_inner = a.softcap > 0.0f ? a.scale / a.softcap : 0.0f;
      sp.mult = a.softcap > 0.0f ? core::kLog2e : a.scale_log2;
      sp.row0 = w.row_begin + local_row0();
      // The mask in 32-bit arithmetic (the host keeps seqlen_q + seqlen_k below 2^31 - 256).
      const core::MaskSpec32 mask = a.mask32(Cfg::kPackGqa ? a.len_q(w.batch) : w.len_q, a.len_k(w.batch));

      // Blocks that need no per-element mask: [vis_lo, vis_hi) (see MaskSpec::tile_fully_visible).
      int vis_lo, vis_hi;
      if constexpr (Cfg::kSetupFromScheduler) {
        vis_lo = sm.tile_setup[t & 1].vis_lo;
        vis_hi = sm.tile_setup[t & 1].vis_hi;
      } else {
        const int row_end = min(w.row_begin + Cfg::kBlockM, w.len_q);
        vis_lo = (mask.key_begin(token(row_end - 1)) + Cfg::kBlockN - 1) / Cfg::kBlockN;
        vis_hi = mask.key_end(token(w.row_begin)) / Cfg::kBlockN;
        vis_lo = max(vis_lo, w.n_first);
        vis_hi = min(vis_hi, w.n_last);
        if (vis_lo >= vis_hi) vis_lo = vis_hi = w.n_first;  // no visible block: every block is masked
      }

      // The first block (KV block n_last - 1) is visible for every row iff vis_lo < vis_hi == n_last.
      // Measured (H200, bench/results/h200-20261202-shortn-ab/): the unmasked form gains up to 6% at head dim
      // 64 and, with 128-key blocks, 3-6% at head dim 128 for N <= 4096; at head dim 256 the kernel with both
      // forms ran 1-5% slower at every N >= 1024, so it keeps the one masked form, as do the ablation
      // variants (a second form spills them). So the two forms go with the two Q buffers (kQBuffers).
      constexpr bool kTwoFirstForms = Cfg::kQBuffers == 2;
      const bool first_visible = kTwoFirstForms && vis_hi == w.n_last && vis_lo < vis_hi;
      // This thread's rows' visible keys, which only the masked blocks read: a tile without one (no mask
      // and seqlen_k a multiple of kBlockN) skips them.
      if (!first_visible || vis_lo > w.n_first || vis_hi < w.n_last) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          sp.key_begin[h] = mask.key_begin(token(sp.row0 + 8 * h));
          sp.key_end[h] = mask.key_end(token(sp.row0 + 8 * h));
        }
      } else {
        sp.key_begin[0] = sp.key_begin[1] = sp.key_end[0] = sp.key_end[1] = 0;
      }

      sm90::mbar_wait(&sm.q_full[qbuf], q_phase<Cfg>(t));
      const int base = kv_iter;
      // Blocks at the tile's end that this warpgroup's rows do not see (Cfg::kLeadSkip): the first block is
      // then always a masked one (a block every row of the tile sees leaves none to skip).
      int lead = 0;
      if constexpr (Cfg::kLeadSkip) {
        lead = lead_blocks(w, mask);
        if (lead > 0) {
          skip_lead(st, base, lead, pending, prev);
          pending = false;
        }
      }
      if constexpr (Cfg::kFirstBlockOnce) {
        // first_block's steps with only the softmax in two forms, the rest compiled once (kDeferEpilogue, so
        // with intra-warpgroup overlap: the P V runs with the next block).
        qk_issue(st, base + lead);
        if (pending) epilogue(st, prev);
        reset_state(st);
        qk_complete(st, w, lead, base + lead);
        float factor[2];
        const int key0 = (w.n_last - 1 - lead) * Cfg::kBlockN;
        if (first_visible)
          softmax_block<false>(st, sp, key0, quad(), factor);
        else
          softmax_block<true>(st, sp, key0, quad(), factor);
        pack_p<Cfg, T>(st);
      } else if (first_visible) {
        first_block<false>(st, sp, w, lead, base + lead, pending, prev);
      } else {
        first_block<true>(st, sp, w, lead, base + lead, pending, prev);
      }
      int idx = lead + 1;
      int n = w.n_last - 2 - lead;
      for (; n >= vis_hi; --n, ++idx) block<true>(st, sp, w, idx, base + idx);
      for (; n >= vis_lo; --n, ++idx) block<false>(st, sp, w, idx, base + idx);
      for (; n >= w.n_first; --n, ++idx) block<true>(st, sp, w, idx, base + idx);
      release_q();  // the tile's last Q K^T has completed (waited for inside the block)
      drain(st, w, idx - 1, base + idx - 1);
      kv_iter = base + idx;
      if constexpr (Cfg::kDeferEpilogue) {
        prev = tile_end(w, sp, t);
        pending = true;
      } else {
        epilogue(st, tile_end(w, sp, t));
      }
    }
    if (Cfg::kDeferEpilogue && pending) epilogue(st, prev);
    // Balance the turn barrier: the last consumer's final hand-over to consumer 0 has no matching wait yet.
    if (Cfg::kPingPong && wg == 0) sm90::named_sync(kTurnBarrier + 0, kTurnThreads);
  }
};

template <typename Cfg, typename T>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fa3_fwd_kernel(const __grid_constant__ Fa3Params params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzled tiles must start on 1024-byte boundaries; the launch adds that much slack.
  const uint32_t raw = sm90::smem_u32(smem_raw);
  const uint32_t pad = (sm90::kSwizzleAtomBytes - raw % sm90::kSwizzleAtomBytes) % sm90::kSwizzleAtomBytes;
  auto& sm = *reinterpret_cast<Fa3Shared<Cfg, T>*>(smem_raw + pad);

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  const int tid = threadIdx.x % kWarpgroupThreads;
  if (threadIdx.x == 0) {
    sm90::prefetch_tensor_map(&params.tm_q);
    sm90::prefetch_tensor_map(&params.tm_k);
    sm90::prefetch_tensor_map(&params.tm_v);
    for (int b = 0; b < Cfg::kQBuffers; ++b) {
      sm90::mbar_init(&sm.q_full[b], 1);
      sm90::mbar_init(&sm.q_empty[b], Cfg::kConsumerWarpgroups * sm90::kWarpgroupWarps);
    }
    for (int s = 0; s < Cfg::kStages; ++s) {
      sm90::mbar_init(&sm.k_full[s], 1);
      sm90::mbar_init(&sm.v_full[s], 1);
      sm90::mbar_init(&sm.k_empty[s], Cfg::kConsumerWarpgroups * sm90::kWarpgroupWarps);
      sm90::mbar_init(&sm.v_empty[s], Cfg::kConsumerWarpgroups);
    }
    sm90::mbar_init(&sm.tile_full, 1);
    sm90::mbar_init(&sm.tile_empty, Cfg::kConsumerThreads + 1);  // every consumer thread, the load thread
    sm90::fence_barrier_init();
  }
  __syncthreads();

  if constexpr (Cfg::kWarpSpecialized) {
    if (warpgroup == 0) {
      sm90::setmaxnreg_dec<Cfg::kProducerRegs>();
      if (tid == 0) producer_loop(sm, params);
      if (tid == 32) scheduler_loop(sm, params);
      return;
    }
    sm90::setmaxnreg_inc<Cfg::kConsumerRegs>();
    Consumer<Cfg, T>{sm, params, warpgroup - 1, tid, 0}.run();
  } else {
    Consumer<Cfg, T>{sm, params, warpgroup, tid, 0}.run();
  }
#endif
}

}  // namespace flashattn::cuda::fa3
