// fa1 backward: Algorithm 4 of the FlashAttention paper, in its loop order.
//
// One thread block per (batch, KV head). The outer loop walks the KV tiles, keeping that tile's dK and dV
// accumulators in registers; the inner loop walks the query tiles of every query head that reads this KV
// head (the GQA group, so dK and dV sum over it without atomics). For each query tile it recomputes
// P = exp(S - LSE) from the saved LSE, accumulates dV += P^T dO and dK += dS^T Q, and read-modify-writes
// dQ += dS K in an fp32 workspace in HBM — the per-step HBM traffic of FA1's backward.
//
// dS = P * (dP - D) with D = rowsum(dO * O), precomputed by fa1_row_dot_kernel (the paper computes it in
// the inner loop; the values are identical). With softcap, dS is also multiplied by the cap's derivative.
//
// Warp w owns query rows 16w .. 16w + 15 of the query tile for S, dP, dS and dQ, and keys 16w .. 16w + 15
// of the KV tile for dK and dV; P and dS pass between the two roles through shared memory.
#pragma once

#include "cuda/sm80/fa1_tile.cuh"

namespace flashattn::cuda::fa1 {

// Backward workspace, fp32: dq [heads_q][rows][kHeadDim] (zeroed before the kernel), row_dot (D) and the
// saved LSE in log2 units, both [heads_q][rows].
struct BackwardWorkspace {
  float* dq;
  float* row_dot;
  int64_t rows;
};

template <typename Cfg>
__host__ __device__ constexpr size_t backward_smem_bytes(size_t elem) {
  return (size_t(Cfg::kBlockN * 2 + Cfg::kBlockM * 2) * Cfg::kLd + size_t(2 * Cfg::kBlockM) * Cfg::kLdP) * elem +
         size_t(2 * Cfg::kBlockM) * sizeof(float);
}

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fa1_backward_kernel(AttnParams p, BackwardWorkspace ws, bool vec) {
  constexpr int kD = Cfg::kHeadDim, kLd = Cfg::kLd, kLdP = Cfg::kLdP;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_k = reinterpret_cast<T*>(smem_raw);
  T* s_v = s_k + kBlockN * kLd;
  T* s_q = s_v + kBlockN * kLd;
  T* s_do = s_q + kBlockM * kLd;
  T* s_p = s_do + kBlockM * kLd;
  T* s_ds = s_p + kBlockM * kLdP;
  float* s_lse = reinterpret_cast<float*>(s_ds + kBlockM * kLdP);  // log2 units
  float* s_dot = s_lse + kBlockM;

  const int kv_head = blockIdx.x, b = blockIdx.y;
  const int group = p.heads_q / p.heads_kv;
  const int len_q = p.len_q(b), len_k = p.len_k(b);
  const core::MaskSpec mask = p.mask(b);
  const T* k = static_cast<const T*>(p.k.ptr) + k_base(p.k, p, b, kv_head);
  const T* v = static_cast<const T*>(p.v.ptr) + k_base(p.v, p, b, kv_head);
  const int warp = threadIdx.x / kWarpSize;

  for (int n0 = 0; n0 < len_k; n0 += kBlockN) {  // outer loop: KV tiles
    load_tile<T, kBlockN, kD, kLd, Cfg::kThreads>(s_k, k + n0 * p.k.row_stride, p.k.row_stride, len_k - n0,
                                                  p.head_dim, vec);
    load_tile<T, kBlockN, kD, kLd, Cfg::kThreads>(s_v, v + n0 * p.v.row_stride, p.v.row_stride, len_k - n0,
                                                  p.head_dim, vec);
    float dk[Cfg::kHeadTiles][4] = {};
    float dv[Cfg::kHeadTiles][4] = {};

    for (int member = 0; member < group; ++member) {  // inner loop: the group's query heads ...
      const int head = kv_head * group + member;
      const T* q = static_cast<const T*>(p.q.ptr) + q_base(p.q, p, b, head);
      const T* dout = static_cast<const T*>(p.dout.ptr) + q_base(p.dout, p, b, head);
      const float* lse = static_cast<const float*>(p.lse.ptr) + int64_t(b) * p.lse.batch_stride +
                         int64_t(head) * p.lse.head_stride + int64_t(p.q_offset(b)) * p.lse.row_stride;
      const int64_t ws_row0 = int64_t(head) * ws.rows + workspace_row(p, b, 0);
      float* ws_dq = ws.dq + ws_row0 * kD;
      const float* ws_dot = ws.row_dot + ws_row0;

      for (int m0 = 0; m0 < len_q; m0 += kBlockM) {  // ... and their query tiles
        const int m_end = min(m0 + kBlockM, len_q);
        if (!tile_pair_active(mask, m0, m_end, n0 / kBlockN, kBlockN)) continue;
        load_tile<T, kBlockM, kD, kLd, Cfg::kThreads>(s_q, q + m0 * p.q.row_stride, p.q.row_stride, len_q - m0,
                                                      p.head_dim, vec);
        load_tile<T, kBlockM, kD, kLd, Cfg::kThreads>(s_do, dout + m0 * p.dout.row_stride, p.dout.row_stride,
                                                      len_q - m0, p.head_dim, vec);
        for (int r = threadIdx.x; r < kBlockM; r += Cfg::kThreads) {
          const bool valid = m0 + r < len_q;
          s_lse[r] = valid ? lse[(m0 + r) * p.lse.row_stride] * core::kLog2e : core::kNegInf;
          s_dot[r] = valid ? ws_dot[m0 + r] : 0.0f;
        }
        __syncthreads();  // K, V (first pass), Q, dO, LSE and D are in shared memory

        // S = Q K^T and dP = dO V^T for this warp's 16 query rows.
        float s[Cfg::kKeyTiles][4] = {};
        float dp[Cfg::kKeyTiles][4] = {};
        #pragma unroll
        for (int kk = 0; kk < kD; kk += kMmaK) {
          uint32_t aq[4], ado[4];
          load_a<kLd>(aq, s_q, warp * kMmaM, kk);
          load_a<kLd>(ado, s_do, warp * kMmaM, kk);
          #pragma unroll
          for (int nt = 0; nt < Cfg::kKeyTiles; nt += 2) {
            uint32_t bk[4], bv[4];
            load_b_pair<kLd>(bk, s_k, nt * kMmaN, kk);
            mma_pair<T>(s[nt], s[nt + 1], aq, bk);
            load_b_pair<kLd>(bv, s_v, nt * kMmaN, kk);
            mma_pair<T>(dp[nt], dp[nt + 1], ado, bv);
          }
        }

        // P from the saved LSE (0 when masked or when the row saw no key), then dS in place of dP.
        const bool full = mask.tile_fully_visible(m0, m_end, n0, n0 + kBlockN);
        #pragma unroll
        for (int nt = 0; nt < Cfg::kKeyTiles; ++nt) {
          #pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int local_row = warp * kMmaM + acc_row(e);
            const int key = n0 + nt * kMmaN + acc_col(e);
            const float lse_log2 = s_lse[local_row];
            const bool visible = (full || mask.visible(m0 + local_row, key)) && lse_log2 != core::kNegInf;
            const float capped = transform_score(p, s[nt][e]);
            const float prob = visible ? exp2f(capped * core::kLog2e - lse_log2) : 0.0f;
            float ds = prob * (dp[nt][e] - s_dot[local_row]);
            if (p.softcap > 0.0f) ds *= core::softcap_grad(capped, p.softcap);
            s[nt][e] = prob;
            dp[nt][e] = ds;
          }
          #pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int at = (warp * kMmaM + acc_row(2 * h)) * kLdP + nt * kMmaN + acc_col(0);
            *reinterpret_cast<uint32_t*>(s_p + at) = pack2<T>(s[nt][2 * h], s[nt][2 * h + 1]);
            *reinterpret_cast<uint32_t*>(s_ds + at) = pack2<T>(dp[nt][2 * h], dp[nt][2 * h + 1]);
          }
        }

        // dQ += dS K for this warp's rows: read, accumulate and write back two n8 column tiles at a time.
        uint32_t a_ds[Cfg::kKeyTiles / 2][4];
        #pragma unroll
        for (int kt = 0; kt < Cfg::kKeyTiles / 2; ++kt) pack_a<T>(a_ds[kt], dp[2 * kt], dp[2 * kt + 1]);
        #pragma unroll
        for (int dt = 0; dt < Cfg::kHeadTiles; dt += 2) {
          float acc[2][4];
          #pragma unroll
          for (int j = 0; j < 2; ++j) {
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = m0 + warp * kMmaM + acc_row(2 * h);
              float2 prev = make_float2(0.0f, 0.0f);
              if (row < len_q) prev = *reinterpret_cast<const float2*>(ws_dq + int64_t(row) * kD + (dt + j) * kMmaN + acc_col(0));
              acc[j][2 * h] = prev.x;
              acc[j][2 * h + 1] = prev.y;
            }
          }
          #pragma unroll
          for (int kt = 0; kt < Cfg::kKeyTiles / 2; ++kt) {
            uint32_t bk[4];
            load_b_pair_trans<kLd>(bk, s_k, dt * kMmaN, kt * kMmaK);
            mma_pair<T>(acc[0], acc[1], a_ds[kt], bk);
          }
          #pragma unroll
          for (int j = 0; j < 2; ++j) {
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = m0 + warp * kMmaM + acc_row(2 * h);
              if (row < len_q)
                *reinterpret_cast<float2*>(ws_dq + int64_t(row) * kD + (dt + j) * kMmaN + acc_col(0)) =
                    make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
            }
          }
        }
        __syncthreads();  // P and dS of every warp are in shared memory

        // dV += P^T dO and dK += dS^T Q for this warp's 16 keys, reducing over the tile's query rows.
        #pragma unroll
        for (int kk = 0; kk < kBlockM; kk += kMmaK) {
          uint32_t ap[4], ads[4];
          load_a_trans<kLdP>(ap, s_p, warp * kMmaM, kk);
          load_a_trans<kLdP>(ads, s_ds, warp * kMmaM, kk);
          #pragma unroll
          for (int dt = 0; dt < Cfg::kHeadTiles; dt += 2) {
            uint32_t bdo[4], bq[4];
            load_b_pair_trans<kLd>(bdo, s_do, dt * kMmaN, kk);
            mma_pair<T>(dv[dt], dv[dt + 1], ap, bdo);
            load_b_pair_trans<kLd>(bq, s_q, dt * kMmaN, kk);
            mma_pair<T>(dk[dt], dk[dt + 1], ads, bq);
          }
        }
        __syncthreads();  // every warp is done with s_q, s_do, s_p and s_ds before the next query tile
      }
    }

    // dK (scaled) and dV of this warp's keys, in the input dtype.
    T* dk_out = static_cast<T*>(p.dk.ptr) + k_base(p.dk, p, b, kv_head);
    T* dv_out = static_cast<T*>(p.dv.ptr) + k_base(p.dv, p, b, kv_head);
    #pragma unroll
    for (int dt = 0; dt < Cfg::kHeadTiles; ++dt) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n0 + warp * kMmaM + acc_row(e);
        const int col = dt * kMmaN + acc_col(e);
        if (key >= len_k || col >= p.head_dim) continue;
        dk_out[int64_t(key) * p.dk.row_stride + col] = T(dk[dt][e] * p.scale);
        dv_out[int64_t(key) * p.dv.row_stride + col] = T(dv[dt][e]);
      }
    }
    __syncthreads();  // every warp is done with s_k and s_v before the next KV tile overwrites them
  }
}

// D = rowsum(dO * O) per (head, workspace row), one warp per row, before the main kernel.
constexpr int kRowWarps = 8;

template <typename T>
__global__ void __launch_bounds__(kRowWarps * kWarpSize) fa1_row_dot_kernel(AttnParams p, BackwardWorkspace ws) {
  const int64_t item = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / kWarpSize;
  if (item >= ws.rows * p.heads_q) return;
  int head;
  int64_t b, i;
  workspace_item(p, ws.rows, item, &head, &b, &i);
  const T* o = static_cast<const T*>(p.out.ptr) + b * p.out.batch_stride + i * p.out.row_stride +
               int64_t(head) * p.out.head_stride;
  const T* d_o = static_cast<const T*>(p.dout.ptr) + b * p.dout.batch_stride + i * p.dout.row_stride +
                 int64_t(head) * p.dout.head_stride;
  float acc = 0.0f;
  for (int c = lane_id(); c < p.head_dim; c += kWarpSize) acc += float(o[c]) * float(d_o[c]);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (lane_id() == 0) ws.row_dot[item] = acc;
}

// dq = scale * dQ workspace, in the input dtype.
template <typename T>
__global__ void __launch_bounds__(kRowWarps * kWarpSize)
    fa1_dq_finalize_kernel(AttnParams p, BackwardWorkspace ws, int ws_head_dim) {
  const int64_t item = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / kWarpSize;
  if (item >= ws.rows * p.heads_q) return;
  int head;
  int64_t b, i;
  workspace_item(p, ws.rows, item, &head, &b, &i);
  const float* src = ws.dq + item * ws_head_dim;
  T* dq = static_cast<T*>(p.dq.ptr) + b * p.dq.batch_stride + i * p.dq.row_stride + int64_t(head) * p.dq.head_stride;
  for (int c = lane_id(); c < p.head_dim; c += kWarpSize) dq[c] = T(src[c] * p.scale);
}

}  // namespace flashattn::cuda::fa1
