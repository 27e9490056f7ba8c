// The KV-parallel FA2 backward kernel (Algorithm 2 of the FlashAttention-2 paper) on mma.sync.
//
// Grid (KV tiles, heads_kv, batch). A CTA keeps dK and dV of its kBlockN keys in registers and walks every
// query tile that can see them, for every query head of its GQA group (so dK/dV of a KV head sum over the
// group without atomics and without a copy of K/V). Per query tile:
//   S  = Q K^T,  dP = dO V^T                     (warps split the kBlockM x kBlockN tile)
//   P  = exp2(S * scale * log2e - LSE * log2e),  dS = P * (dP - D) [* softcap'(.)]   -> shared memory
//   dV += P^T dO,  dK += dS^T Q                   (warps split kBlockN x head_dim; ldmatrix.trans operands)
//   dQ += dS K  into the fp32 accumulator with atomics (default mode only; see fa2_bwd_dq.cuh)
// Q, dO and the per-row LSE and D of the next tile load with cp.async while the current one computes.
#pragma once

#include "cuda/sm80/fa2_bwd_tile.cuh"

namespace flashattn::cuda::fa2_bwd {

// kSoftcap: the call has a softcap (ScoreMath); two instantiations, picked at launch.
template <class Cfg, bool kSoftcap>
__global__ void __launch_bounds__(Cfg::kThreads, 1) dkdv_kernel(const AttnParams a, const Workspace ws,
                                                                 const bool accumulate_dq) {
  using T = typename Cfg::T;
  constexpr int kM = Cfg::kBlockM, kN = Cfg::kBlockN, kD = Cfg::kHeadDim;
  extern __shared__ __align__(16) unsigned char smem[];
  T* const sK = reinterpret_cast<T*>(smem + Cfg::kOffK);
  T* const sV = reinterpret_cast<T*>(smem + Cfg::kOffV);
  T* const sP = reinterpret_cast<T*>(smem + Cfg::kOffP);
  T* const sDs = reinterpret_cast<T*>(smem + Cfg::kOffDs);

  const int n_block = blockIdx.x, kv_head = blockIdx.y, b = blockIdx.z;
  const int len_q = a.len_q(b), len_k = a.len_k(b);
  const int n0 = n_block * kN;
  if (n0 >= len_k) return;  // past the end of a shorter varlen sequence: no keys, nothing to write
  const int keys_valid = min(kN, len_k - n0);

  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int g = lane / 4, t4 = lane % 4;  // fragment row group and column pair (ptx_sm80.cuh)
  const core::MaskSpec kv_mask = a.mask(b);

  const int group = a.heads_q / a.heads_kv;
  const RowRange rows = query_rows_seeing(kv_mask, n0, n0 + keys_valid);
  const int m_first = rows.first < rows.last ? int(rows.first / kM) : 0;
  const int m_count = rows.first < rows.last ? int((rows.last + kM - 1) / kM) - m_first : 0;
  const int num_tiles = group * m_count;

  // This warp's block origin in each of the three warp grids (Cfg).
  const int s_row = (warp % Cfg::kSWarpsM) * Cfg::kSRowTiles * kMmaM;
  const int s_col = (warp / Cfg::kSWarpsM) * Cfg::kSColTiles * kMmaN;
  const int kv_row = (warp % Cfg::kKvWarpsN) * Cfg::kKvRowTiles * kMmaM;
  const int kv_col = (warp / Cfg::kKvWarpsN) * Cfg::kKvColTiles * kMmaN;
  const int q_row = (warp % Cfg::kQWarpsM) * Cfg::kQRowTiles * kMmaM;
  const int q_col = (warp / Cfg::kQWarpsM) * Cfg::kQColTiles * kMmaN;

  // 16-row accumulator block of this sequence's first query row (accum_row0; fewer than 2^31 / 16).
  const int q_block0 = int(accum_row0(packed_q_row(a, b, 0), b) / kAccumTileRows);

  float dk[Cfg::kKvRowTiles][Cfg::kKvColTiles][4], dv[Cfg::kKvRowTiles][Cfg::kKvColTiles][4];
  zero(dk);
  zero(dv);

  // Query tiles are visited head-major: (head kv_head * group, every row block from m_start on), then the
  // next head of the group. The coordinates advance by increment (no division by m_count), and every
  // address below is a per-tile base plus a per-thread 32-bit offset: with all 255 registers taken by the
  // products, the compiler recomputes the addressing at the top of every tile, so it has to be cheap to
  // recompute.
  const int m_begin = m_first * kM, m_end = (m_first + m_count) * kM;
  struct QueryTile {
    int h, m0;
  };
  // With Cfg::kRotatedWalk the walk starts at row block n_block (modulo the range) and wraps around.
  // Without it the head advances at the wrap itself: one compare fewer per tile, and the 128-key kernels
  // compile as they were measured.
  const int m_start = m_begin + (Cfg::kRotatedWalk && m_count > 0 ? n_block % m_count : 0) * kM;
  auto next_tile = [&](QueryTile t) {
    t.m0 += kM;
    if constexpr (Cfg::kRotatedWalk) {
      if (t.m0 >= m_end) t.m0 = m_begin;
      if (t.m0 == m_start) ++t.h;
    } else {
      if (t.m0 >= m_end) t.m0 = m_begin, ++t.h;
    }
    return t;
  };
  const int q_off = a.q_offset(b);  // first row of this sequence in q / dout
  const T* const q_bh = row_ptr<const T>(a.q, b, q_off, 0);
  const T* const do_bh = row_ptr<const T>(a.dout, b, q_off, 0);
  const fa2::TileLoader<kM, kD, Cfg::kStrideD, Cfg::kThreads> q_loader(tid);

  // Issues the cp.async loads of query tile t into stage `st`.
  auto load_query_tile = [&](QueryTile t, int st) {
    const T* q = q_bh + int64_t(t.m0) * a.q.row_stride + t.h * a.q.head_stride;
    const T* dout = do_bh + int64_t(t.m0) * a.dout.row_stride + t.h * a.dout.head_stride;
    T* sQ = reinterpret_cast<T*>(smem + Cfg::kOffQ + st * Cfg::kQTileBytes);
    T* sDo = reinterpret_cast<T*>(smem + Cfg::kOffDo + st * Cfg::kQTileBytes);
    q_loader.load(sQ, q, int(a.q.row_stride), len_q - t.m0, kD);
    q_loader.load(sDo, dout, int(a.dout.row_stride), len_q - t.m0, kD);
    const int64_t vec = row_vec_base(a, ws, b, t.h) + t.m0;  // rows_pad covers the whole tile
    load_row_vec_async<kM>(reinterpret_cast<float*>(smem + Cfg::kOffLse + st * Cfg::kRowVecBytes), ws.lse_log2 + vec,
                           tid);
    load_row_vec_async<kM>(reinterpret_cast<float*>(smem + Cfg::kOffDelta + st * Cfg::kRowVecBytes), ws.delta + vec,
                           tid - kM / kFloatsPerChunk);  // the next threads copy D
  };

  QueryTile cur{kv_head * group, m_start};
  if (num_tiles > 0) {
    const int64_t krow0 = int64_t(a.k_offset(b)) + n0;
    const fa2::TileLoader<kN, kD, Cfg::kStrideD, Cfg::kThreads> kv_loader(tid);
    kv_loader.load(sK, row_ptr<const T>(a.k, b, krow0, kv_head), int(a.k.row_stride), keys_valid, kD);
    kv_loader.load(sV, row_ptr<const T>(a.v, b, krow0, kv_head), int(a.v.row_stride), keys_valid, kD);
    load_query_tile(cur, 0);
    cp_async_commit();
  }

  for (int it = 0; it < num_tiles; ++it, cur = next_tile(cur)) {
    const int st = it % Cfg::kStages;
    // One barrier both publishes this tile's copies and ends iteration it - 1 for every warp: after it,
    // the other stage (read in it - 1) and the P/dS tiles are free, so the next tile's loads can go out
    // from here on (behind the S product, or here with Cfg::kLoadsAfterS false) and the iteration needs no
    // barrier at its end.
    cp_async_wait<0>();
    __syncthreads();
    const auto issue_next_loads = [&] {
      if (it + 1 < num_tiles) {
        load_query_tile(next_tile(cur), (it + 1) % Cfg::kStages);
        cp_async_commit();
      }
    };
    if constexpr (!Cfg::kLoadsAfterS) issue_next_loads();

    const int h = cur.h, m0 = cur.m0;
    const T* sQ = reinterpret_cast<const T*>(smem + Cfg::kOffQ + st * Cfg::kQTileBytes);
    const T* sDo = reinterpret_cast<const T*>(smem + Cfg::kOffDo + st * Cfg::kQTileBytes);
    const float* sLse = reinterpret_cast<const float*>(smem + Cfg::kOffLse + st * Cfg::kRowVecBytes);
    const float* sDelta = reinterpret_cast<const float*>(smem + Cfg::kOffDelta + st * Cfg::kRowVecBytes);

    // ---- S = Q K^T -> P (to shared memory) and P * softcap'; dP = dO V^T -> dS (to shared memory) ----
    {
      float s[Cfg::kSRowTiles][Cfg::kSColTiles][4];
      zero(s);
      warp_mma<T, Cfg::kSRowTiles, Cfg::kSColTiles, kD / kMmaK, Cfg::kPrefetchFragments>(
          s, [&](uint32_t(&f)[4], int mt, int kk) { load_a(f, sQ, Cfg::kStrideD, s_row + mt * kMmaM, kk * kMmaK, lane); },
          [&](uint32_t(&f)[2][2], int np, int kk) {
            load_b_nk(f, sK, Cfg::kStrideD, s_col + np * 2 * kMmaN, kk * kMmaK, lane);
          });
      if constexpr (Cfg::kLoadsAfterS) issue_next_loads();
      // Fragment element e of tile (mt, nt) sits at row s_row + 16 mt + g + 8 (e / 2), column
      // s_col + 8 nt + 2 t4 + e % 2. S is overwritten with P * softcap' to keep the register budget.
      // The mask and the score constants are rebuilt here from the kernel parameters (constant bank)
      // rather than kept live across the loop: registers are the scarce resource of this kernel.
      const core::MaskSpec mask = core::MaskSpec::make(len_q, len_k, a.causal, a.window_left, a.window_right);
      const ScoreMath<kSoftcap> math = ScoreMath<kSoftcap>::make(a);
      // P of the whole warp tile; kMasked: per-element visibility tests (tiles on the mask boundary or
      // past the last key), which also spares interior tiles the rows' key ranges (64-bit mask arithmetic).
      with_checks(!mask.tile_fully_visible(m0, min(m0 + kM, len_q), n0, n0 + kN), [&](auto masked) {
        constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
        for (int mt = 0; mt < Cfg::kSRowTiles; ++mt) {
          const int r_lo = s_row + mt * kMmaM + g, r_hi = r_lo + 8;
          const float lse_lo = sLse[r_lo], lse_hi = sLse[r_hi];
          RowKeys keys_lo{0, 0}, keys_hi{0, 0};
          if constexpr (kMasked) {
            keys_lo = RowKeys::of(mask, m0 + r_lo);
            keys_hi = RowKeys::of(mask, m0 + r_hi);
          }
          uint32_t packed[Cfg::kSColTiles][2];  // rows r_lo, r_hi of each tile, as 16-bit pairs
#pragma unroll
          for (int nt = 0; nt < Cfg::kSColTiles; ++nt) {
            const int col = s_col + nt * kMmaN + 2 * t4;
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const bool hi = e >= 2;
              const bool visible = !kMasked || (hi ? keys_hi : keys_lo).sees(n0 + col + e % 2);
              p[e] = math.p_of(s[mt][nt][e], hi ? lse_hi : lse_lo, visible, &s[mt][nt][e]);
            }
            packed[nt][0] = pack2<T>(p[0], p[1]);
            packed[nt][1] = pack2<T>(p[2], p[3]);
          }
#pragma unroll
          for (int np = 0; np < Cfg::kSColTiles / 2; ++np)
            store_tile_pair<Cfg::kStoreMatrix>(sP, Cfg::kStrideN, s_row + mt * kMmaM, s_col + np * 2 * kMmaN,
                                               packed[2 * np][0], packed[2 * np][1], packed[2 * np + 1][0],
                                               packed[2 * np + 1][1], lane);
        }
      });

#pragma unroll
      for (int pass = 0; pass < Cfg::kDpPasses; ++pass) {
        constexpr int kTiles = Cfg::kSColTiles / Cfg::kDpPasses;
        const int col0 = s_col + pass * kTiles * kMmaN;
        float dp[Cfg::kSRowTiles][kTiles][4];
        zero(dp);
        warp_mma<T, Cfg::kSRowTiles, kTiles, kD / kMmaK, Cfg::kPrefetchFragments>(
            dp,
            [&](uint32_t(&f)[4], int mt, int kk) {
              load_a(f, sDo, Cfg::kStrideD, s_row + mt * kMmaM, kk * kMmaK, lane);
            },
            [&](uint32_t(&f)[2][2], int np, int kk) {
              load_b_nk(f, sV, Cfg::kStrideD, col0 + np * 2 * kMmaN, kk * kMmaK, lane);
            });
#pragma unroll
        for (int mt = 0; mt < Cfg::kSRowTiles; ++mt) {
          const int r_lo = s_row + mt * kMmaM + g, r_hi = r_lo + 8;
          const float d_lo = sDelta[r_lo], d_hi = sDelta[r_hi];
          static_assert(kTiles % 2 == 0, "dS is stored in pairs of 8-column tiles");
#pragma unroll
          for (int np = 0; np < kTiles / 2; ++np) {
            uint32_t packed[2][2];  // tiles 2 np, 2 np + 1; rows r_lo, r_hi
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const float* pg = s[mt][pass * kTiles + 2 * np + j];
              const float* dpv = dp[mt][2 * np + j];
              packed[j][0] = pack2<T>(pg[0] * (dpv[0] - d_lo), pg[1] * (dpv[1] - d_lo));
              packed[j][1] = pack2<T>(pg[2] * (dpv[2] - d_hi), pg[3] * (dpv[3] - d_hi));
            }
            store_tile_pair<Cfg::kStoreMatrix>(sDs, Cfg::kStrideN, s_row + mt * kMmaM, col0 + np * 2 * kMmaN,
                                               packed[0][0], packed[0][1], packed[1][0], packed[1][1], lane);
          }
        }
      }
    }
    __syncthreads();  // P and dS complete before any warp reads them transposed

    // ---- dV += P^T dO, dK += dS^T Q ----
    warp_mma<T, Cfg::kKvRowTiles, Cfg::kKvColTiles, kM / kMmaK, Cfg::kPrefetchFragments>(
        dv,
        [&](uint32_t(&f)[4], int mt, int kk) {
          load_a_trans(f, sP, Cfg::kStrideN, kk * kMmaK, kv_row + mt * kMmaM, lane);
        },
        [&](uint32_t(&f)[2][2], int np, int kk) {
          load_b_kn(f, sDo, Cfg::kStrideD, kk * kMmaK, kv_col + np * 2 * kMmaN, lane);
        });
    warp_mma<T, Cfg::kKvRowTiles, Cfg::kKvColTiles, kM / kMmaK, Cfg::kPrefetchFragments>(
        dk,
        [&](uint32_t(&f)[4], int mt, int kk) {
          load_a_trans(f, sDs, Cfg::kStrideN, kk * kMmaK, kv_row + mt * kMmaM, lane);
        },
        [&](uint32_t(&f)[2][2], int np, int kk) {
          load_b_kn(f, sQ, Cfg::kStrideD, kk * kMmaK, kv_col + np * 2 * kMmaN, lane);
        });

    // ---- dQ += dS K (unscaled) into the fp32 accumulator ----
    if (accumulate_dq) {
#pragma unroll
      for (int pass = 0; pass < Cfg::kQPasses; ++pass) {
        constexpr int kTiles = Cfg::kQColTiles / Cfg::kQPasses;
        const int col0 = q_col + pass * kTiles * kMmaN;
        float dq[Cfg::kQRowTiles][kTiles][4];
        zero(dq);
        warp_mma<T, Cfg::kQRowTiles, kTiles, kN / kMmaK, Cfg::kPrefetchFragments>(
            dq,
            [&](uint32_t(&f)[4], int mt, int kk) {
              load_a(f, sDs, Cfg::kStrideN, q_row + mt * kMmaM, kk * kMmaK, lane);
            },
            [&](uint32_t(&f)[2][2], int np, int kk) {
              load_b_kn(f, sK, Cfg::kStrideD, kk * kMmaK, col0 + np * 2 * kMmaN, lane);
            });
        // One 512-byte accumulator tile per fragment (accum_row0): its 16 rows are this tile's rows
        // q_row + 16 mt (m0 and q_row are multiples of 16), its 8 columns col0 + 8 nt. Fragments wholly
        // past the sequence's end are left out (their block may be the next sequence's); the padding rows
        // of the last one carry dS = 0 into the sequence's own block, which the post-pass does not read.
        const int tile_floats = a.heads_q * (kD / kAccumTileCols) * kAccumTileFloats;  // per 16-row block
        float* const acc_tile = ws.dq_accum +
                                accum_tile(q_block0 + (m0 + q_row) / kAccumTileRows, h, col0 / kAccumTileCols,
                                           a.heads_q, kD / kAccumTileCols) +
                                (g * 16 + t4 * 4);
#pragma unroll
        for (int mt = 0; mt < Cfg::kQRowTiles; ++mt) {
          const bool in_seq = m0 + q_row + mt * kMmaM < len_q;  // warp-uniform
#pragma unroll
          for (int nt = 0; nt < kTiles; ++nt) {
            const float* x = dq[mt][nt];
            if (in_seq) atomic_add4(acc_tile + mt * tile_floats + nt * kAccumTileFloats, x[0], x[1], x[2], x[3]);
          }
        }
      }
    }
  }

  // ---- Epilogue: dK * scale and dV in the input dtype (keys past the end are not written) ----
  // The warp's block origin from a fresh read of the thread index (an asm the compiler cannot merge with
  // the first): kept from the kernel's start it would hold a register across the main loop.
  unsigned tid_again;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_again));
  const int warp_e = int(tid_again) / kWarpSize;
  const int kv_row_e = (warp_e % Cfg::kKvWarpsN) * Cfg::kKvRowTiles * kMmaM;
  const int kv_col_e = (warp_e / Cfg::kKvWarpsN) * Cfg::kKvColTiles * kMmaN;
  const int64_t krow0 = int64_t(a.k_offset(b)) + n0;
  T* dk_out = row_ptr<T>(a.dk, b, krow0, kv_head);
  T* dv_out = row_ptr<T>(a.dv, b, krow0, kv_head);
#pragma unroll
  for (int mt = 0; mt < Cfg::kKvRowTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = kv_row_e + mt * kMmaM + g + 8 * half;
      if (r >= keys_valid) continue;
#pragma unroll
      for (int nt = 0; nt < Cfg::kKvColTiles; ++nt) {
        const int col = kv_col_e + nt * kMmaN + 2 * t4;
        *reinterpret_cast<uint32_t*>(dk_out + r * a.dk.row_stride + col) =
            pack2<T>(dk[mt][nt][2 * half] * a.scale, dk[mt][nt][2 * half + 1] * a.scale);
        *reinterpret_cast<uint32_t*>(dv_out + r * a.dv.row_stride + col) =
            pack2<T>(dv[mt][nt][2 * half], dv[mt][nt][2 * half + 1]);
      }
    }
}

}  // namespace flashattn::cuda::fa2_bwd
