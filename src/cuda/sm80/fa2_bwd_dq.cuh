// The Q-parallel dQ kernel of deterministic mode.
//
// In the default mode dQ is summed over KV tiles with fp32 atomics, whose order varies run to run. For
// bitwise-reproducible gradients the dK/dV kernel skips dQ and this kernel forms it instead: a CTA owns
// kBlockM query rows of one head and walks the KV tiles in ascending order, recomputing S, P, dP and dS
// (each warp owns 16 rows, so P and dS stay in registers, as in the FA2 forward) and accumulating
// dQ = dS K in registers; dq is written once, scaled, in the input dtype.
// Cost: S and dP are computed twice (here and in the dK/dV kernel), i.e. 7 instead of 5 matmuls of the
// same size, about 1.4x the FLOPs of the default mode, and no dQ accumulator traffic.
#pragma once

#include "cuda/sm80/fa2_bwd_tile.cuh"

namespace flashattn::cuda::fa2_bwd {

template <class Cfg, bool kSoftcap>  // kSoftcap as in dkdv_kernel
__global__ void __launch_bounds__(Cfg::kThreads, 1) dq_kernel(const AttnParams a, const Workspace ws) {
  using T = typename Cfg::T;
  constexpr int kM = Cfg::kBlockM, kN = Cfg::kBlockN, kD = Cfg::kHeadDim;
  extern __shared__ __align__(16) unsigned char smem[];
  T* const sQ = reinterpret_cast<T*>(smem + Cfg::kOffQ);
  T* const sDo = reinterpret_cast<T*>(smem + Cfg::kOffDo);

  const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int len_q = a.len_q(b), len_k = a.len_k(b);
  const int m0 = m_block * kM;
  if (m0 >= len_q) return;
  const int rows_valid = min(kM, len_q - m0);
  const int kv_head = h / (a.heads_q / a.heads_kv);

  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int g = lane / 4, t4 = lane % 4;
  const int w_row = warp * kMmaM;
  const core::MaskSpec mask = a.mask(b);
  const ScoreMath<kSoftcap> math = ScoreMath<kSoftcap>::make(a);
  const core::BlockRange blocks = core::kv_block_range(mask, m0, m0 + rows_valid, kN);

  const int r_lo = w_row + g, r_hi = r_lo + 8;
  const int64_t vec = row_vec_base(a, ws, b, h) + m0;  // rows_pad covers the whole tile
  const float lse_lo = ws.lse_log2[vec + r_lo], lse_hi = ws.lse_log2[vec + r_hi];
  const float d_lo = ws.delta[vec + r_lo], d_hi = ws.delta[vec + r_hi];
  const RowKeys keys_lo = RowKeys::of(mask, m0 + r_lo), keys_hi = RowKeys::of(mask, m0 + r_hi);

  float dq[Cfg::kQTiles][4];
#pragma unroll
  for (int i = 0; i < Cfg::kQTiles; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[i][e] = 0.0f;

  // Per-tile addressing is a base pointer plus per-thread 32-bit offsets (fa2::TileLoader): the loop top
  // recomputes it for every KV tile.
  const int k_off = a.k_offset(b);
  const T* const k_bh = row_ptr<const T>(a.k, b, k_off, kv_head);
  const T* const v_bh = row_ptr<const T>(a.v, b, k_off, kv_head);
  const fa2::TileLoader<kN, kD, Cfg::kStrideD, Cfg::kThreads> kv_loader(tid);
  auto load_kv_tile = [&](int n_block, int st) {
    const int n0 = n_block * kN;
    T* sK = reinterpret_cast<T*>(smem + Cfg::kOffK + st * Cfg::kKvTileBytes);
    T* sV = reinterpret_cast<T*>(smem + Cfg::kOffV + st * Cfg::kKvTileBytes);
    kv_loader.load(sK, k_bh + int64_t(n0) * a.k.row_stride, int(a.k.row_stride), len_k - n0, kD);
    kv_loader.load(sV, v_bh + int64_t(n0) * a.v.row_stride, int(a.v.row_stride), len_k - n0, kD);
  };

  if (!blocks.empty()) {
    const int64_t qrow0 = int64_t(a.q_offset(b)) + m0;
    const fa2::TileLoader<kM, kD, Cfg::kStrideD, Cfg::kThreads> q_loader(tid);
    q_loader.load(sQ, row_ptr<const T>(a.q, b, qrow0, h), int(a.q.row_stride), rows_valid, kD);
    q_loader.load(sDo, row_ptr<const T>(a.dout, b, qrow0, h), int(a.dout.row_stride), rows_valid, kD);
    load_kv_tile(int(blocks.first), 0);
    cp_async_commit();
  }

  // Fixed ascending order over the KV tiles: the summation order of dQ never depends on scheduling.
  for (int n_block = int(blocks.first); n_block < int(blocks.last); ++n_block) {
    const int st = (n_block - int(blocks.first)) % Cfg::kStages;
    // One barrier both publishes this tile's copies and ends the previous iteration for every warp, so
    // the other stage (read there) is free: the next tile's loads go out after it (as in dkdv_kernel).
    cp_async_wait<0>();
    __syncthreads();
    if (n_block + 1 < int(blocks.last)) {
      load_kv_tile(n_block + 1, (st + 1) % Cfg::kStages);
      cp_async_commit();
    }

    const int n0 = n_block * kN;
    const T* sK = reinterpret_cast<const T*>(smem + Cfg::kOffK + st * Cfg::kKvTileBytes);
    const T* sV = reinterpret_cast<const T*>(smem + Cfg::kOffV + st * Cfg::kKvTileBytes);

    float s[Cfg::kSTiles][4], dp[Cfg::kSTiles][4];
#pragma unroll
    for (int i = 0; i < Cfg::kSTiles; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.0f;
#pragma unroll Cfg::kUnrollQk
    for (int kk = 0; kk < kD / kMmaK; ++kk) {
      uint32_t aq[4], ado[4];
      load_a(aq, sQ, Cfg::kStrideD, w_row, kk * kMmaK, lane);
      load_a(ado, sDo, Cfg::kStrideD, w_row, kk * kMmaK, lane);
#pragma unroll
      for (int np = 0; np < Cfg::kSTiles / 2; ++np) {
        uint32_t bk[2][2], bv[2][2];
        load_b_nk(bk, sK, Cfg::kStrideD, np * 2 * kMmaN, kk * kMmaK, lane);
        load_b_nk(bv, sV, Cfg::kStrideD, np * 2 * kMmaN, kk * kMmaK, lane);
        mma_16816<T>(s[2 * np], aq, bk[0]);
        mma_16816<T>(s[2 * np + 1], aq, bk[1]);
        mma_16816<T>(dp[2 * np], ado, bv[0]);
        mma_16816<T>(dp[2 * np + 1], ado, bv[1]);
      }
    }

    // dS as A fragments of dQ = dS K: the accumulator layout of column tiles 2k and 2k+1 is exactly the
    // A layout of k-step k (a0/a1 from tile 2k rows g/g+8, a2/a3 from tile 2k+1), so no shuffle is needed.
    // kMasked: per-element visibility tests (with_checks: interior tiles issue none).
    uint32_t ads[Cfg::kSTiles / 2][4];
    with_checks(!mask.tile_fully_visible(m0, m0 + rows_valid, n0, n0 + kN), [&](auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int i = 0; i < Cfg::kSTiles; ++i) {
        float p[4], ds[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool hi = e >= 2;
          const int key = n0 + i * kMmaN + 2 * t4 + e % 2;
          const bool visible = !kMasked || (hi ? keys_hi : keys_lo).sees(key);
          math.p_ds(s[i][e], dp[i][e], hi ? lse_hi : lse_lo, hi ? d_hi : d_lo, visible, &p[e], &ds[e]);
        }
        ads[i / 2][(i % 2) * 2] = pack2<T>(ds[0], ds[1]);
        ads[i / 2][(i % 2) * 2 + 1] = pack2<T>(ds[2], ds[3]);
      }
    });

#pragma unroll
    for (int kk = 0; kk < kN / kMmaK; ++kk) {
#pragma unroll
      for (int np = 0; np < Cfg::kQTiles / 2; ++np) {
        uint32_t bk[2][2];
        load_b_kn(bk, sK, Cfg::kStrideD, kk * kMmaK, np * 2 * kMmaN, lane);
        mma_16816<T>(dq[2 * np], ads[kk], bk[0]);
        mma_16816<T>(dq[2 * np + 1], ads[kk], bk[1]);
      }
    }
  }

  // dq = scale * dS K in the input dtype; rows past the end belong to the next sequence: not written.
  T* dq_out = row_ptr<T>(a.dq, b, int64_t(a.q_offset(b)) + m0, h);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = w_row + g + 8 * half;
    if (r >= rows_valid) continue;
#pragma unroll
    for (int i = 0; i < Cfg::kQTiles; ++i) {
      const int col = i * kMmaN + 2 * t4;
      *reinterpret_cast<uint32_t*>(dq_out + r * a.dq.row_stride + col) =
          pack2<T>(dq[i][2 * half] * math.scale, dq[i][2 * half + 1] * math.scale);
    }
  }
}

}  // namespace flashattn::cuda::fa2_bwd
