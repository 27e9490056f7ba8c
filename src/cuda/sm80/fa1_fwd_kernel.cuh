// fa1 forward: Algorithm 1 of the FlashAttention paper, in its loop order.
//
// One thread block per (batch, query head) — FA1 parallelizes over batch and heads only. The outer loop
// walks the KV tiles; for each one the inner loop walks every query tile and, for it, reads the running
// output O, row max m and row sum l from device memory (fp32 workspace), folds in the new tile's scores
// and writes them back. That round trip of O through HBM on every outer step is what FA2 removed by
// swapping the loops; it is kept here on purpose. O stays unnormalized (scaled by exp(-m) only); a final
// pass divides by l and writes the output in the input dtype and LSE = m + log l.
//
// Warp w owns query rows 16w .. 16w + 15 of each query tile. A row whose sum l is still 0 has seen no
// visible key yet, which lets the workspace start from plain zeros (its m is then meaningless).
#pragma once

#include "cuda/sm80/fa1_tile.cuh"

namespace flashattn::cuda::fa1 {

// Forward workspace, fp32: o [heads_q][rows][kHeadDim], m and l [heads_q][rows], m in log2 units.
struct ForwardWorkspace {
  float* o;
  float* m;
  float* l;
  int64_t rows;  // workspace rows per head (total query rows)
};

template <typename Cfg>
__host__ __device__ constexpr size_t forward_smem_bytes(size_t elem) {
  return size_t(Cfg::kBlockN * 2 + Cfg::kBlockM) * Cfg::kLd * elem;
}

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fa1_forward_kernel(AttnParams p, ForwardWorkspace ws, bool vec) {
  constexpr int kD = Cfg::kHeadDim, kLd = Cfg::kLd, kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_k = reinterpret_cast<T*>(smem_raw);
  T* s_v = s_k + kBlockN * kLd;
  T* s_q = s_v + kBlockN * kLd;

  const int head = blockIdx.x, b = blockIdx.y;
  const int kv_head = head / (p.heads_q / p.heads_kv);
  const int len_q = p.len_q(b), len_k = p.len_k(b);
  const core::MaskSpec mask = p.mask(b);
  const T* q = static_cast<const T*>(p.q.ptr) + q_base(p.q, p, b, head);
  const T* k = static_cast<const T*>(p.k.ptr) + k_base(p.k, p, b, kv_head);
  const T* v = static_cast<const T*>(p.v.ptr) + k_base(p.v, p, b, kv_head);
  const int64_t ws_row0 = int64_t(head) * ws.rows + workspace_row(p, b, 0);
  float* ws_o = ws.o + ws_row0 * kD;
  float* ws_m = ws.m + ws_row0;
  float* ws_l = ws.l + ws_row0;
  const int warp = threadIdx.x / kWarpSize;

  for (int n0 = 0; n0 < len_k; n0 += kBlockN) {  // outer loop: KV tiles
    load_tile<T, kBlockN, kD, kLd, Cfg::kThreads>(s_k, k + n0 * p.k.row_stride, p.k.row_stride, len_k - n0,
                                                  p.head_dim, vec);
    load_tile<T, kBlockN, kD, kLd, Cfg::kThreads>(s_v, v + n0 * p.v.row_stride, p.v.row_stride, len_k - n0,
                                                  p.head_dim, vec);
    for (int m0 = 0; m0 < len_q; m0 += kBlockM) {  // inner loop: query tiles
      const int m_end = min(m0 + kBlockM, len_q);
      // Causal and window masks leave some (query tile, KV tile) pairs empty; the test is block-uniform.
      if (!tile_pair_active(mask, m0, m_end, n0 / kBlockN, kBlockN)) continue;
      load_tile<T, kBlockM, kD, kLd, Cfg::kThreads>(s_q, q + m0 * p.q.row_stride, p.q.row_stride, len_q - m0,
                                                    p.head_dim, vec);
      __syncthreads();  // K, V (first pass) and Q are in shared memory

      // S = Q K^T for this warp's 16 rows and the tile's kBlockN keys.
      float s[Cfg::kKeyTiles][4] = {};
      #pragma unroll
      for (int kk = 0; kk < kD; kk += kMmaK) {
        uint32_t a[4];
        load_a<kLd>(a, s_q, warp * kMmaM, kk);
        #pragma unroll
        for (int nt = 0; nt < Cfg::kKeyTiles; nt += 2) {
          uint32_t bk[4];
          load_b_pair<kLd>(bk, s_k, nt * kMmaN, kk);
          mma_pair<T>(s[nt], s[nt + 1], a, bk);
        }
      }

      // Scores in log2 units; masked and out-of-range keys become -inf.
      const bool full = mask.tile_fully_visible(m0, m_end, n0, n0 + kBlockN);
      float tile_max[2] = {core::kNegInf, core::kNegInf};
      #pragma unroll
      for (int nt = 0; nt < Cfg::kKeyTiles; ++nt) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = m0 + warp * kMmaM + acc_row(e);
          const int key = n0 + nt * kMmaN + acc_col(e);
          const bool visible = full || mask.visible(row, key);
          s[nt][e] = visible ? transform_score(p, s[nt][e]) * core::kLog2e : core::kNegInf;
          tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
        }
      }

      // Read the row statistics from HBM, merge, and turn the scores into exp2(s - m_new).
      float alpha[2], l_new[2], m_new[2];
      int64_t rows[2];
      bool row_valid[2];
      #pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + warp * kMmaM + acc_row(2 * h);
        rows[h] = row;
        row_valid[h] = row < len_q;
        float m_old = core::kNegInf, l_old = 0.0f;
        if (row_valid[h]) {
          l_old = ws_l[row];
          if (l_old > 0.0f) m_old = ws_m[row];
        }
        m_new[h] = fmaxf(m_old, quad_max(tile_max[h]));
        // -inf - -inf is NaN: a row with no visible key so far keeps a zero output and subtracts 0.
        alpha[h] = m_old == core::kNegInf ? 0.0f : exp2f(m_old - m_new[h]);
        const float safe_max = m_new[h] == core::kNegInf ? 0.0f : m_new[h];
        float sum = 0.0f;
        #pragma unroll
        for (int nt = 0; nt < Cfg::kKeyTiles; ++nt) {
          #pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            s[nt][e] = exp2f(s[nt][e] - safe_max);
            sum += s[nt][e];
          }
        }
        l_new[h] = alpha[h] * l_old + quad_sum(sum);
      }

      uint32_t pa[Cfg::kKeyTiles / 2][4];
      #pragma unroll
      for (int kt = 0; kt < Cfg::kKeyTiles / 2; ++kt) pack_a<T>(pa[kt], s[2 * kt], s[2 * kt + 1]);

      // O = alpha * O + P V, read from and written back to HBM two n8 column tiles at a time.
      #pragma unroll
      for (int dt = 0; dt < Cfg::kHeadTiles; dt += 2) {
        float o[2][4];
        #pragma unroll
        for (int j = 0; j < 2; ++j) {
          #pragma unroll
          for (int h = 0; h < 2; ++h) {
            float2 prev = make_float2(0.0f, 0.0f);
            if (row_valid[h]) prev = *reinterpret_cast<const float2*>(ws_o + rows[h] * kD + (dt + j) * kMmaN + acc_col(0));
            o[j][2 * h] = prev.x * alpha[h];
            o[j][2 * h + 1] = prev.y * alpha[h];
          }
        }
        #pragma unroll
        for (int kt = 0; kt < Cfg::kKeyTiles / 2; ++kt) {
          uint32_t bv[4];
          load_b_pair_trans<kLd>(bv, s_v, dt * kMmaN, kt * kMmaK);
          mma_pair<T>(o[0], o[1], pa[kt], bv);
        }
        #pragma unroll
        for (int j = 0; j < 2; ++j) {
          #pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (row_valid[h])
              *reinterpret_cast<float2*>(ws_o + rows[h] * kD + (dt + j) * kMmaN + acc_col(0)) =
                  make_float2(o[j][2 * h], o[j][2 * h + 1]);
          }
        }
      }
      if (lane_id() % 4 == 0) {
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (!row_valid[h]) continue;
          ws_m[rows[h]] = m_new[h];
          ws_l[rows[h]] = l_new[h];
        }
      }
      __syncthreads();  // every warp is done with s_q before the next query tile overwrites it
    }
    __syncthreads();  // every warp is done with s_k and s_v before the next KV tile overwrites them
  }
}

// Final pass: out = O / l in the input dtype, LSE = (m + log2 l) ln 2; a row with l = 0 saw no key and gets
// out = 0, LSE = -inf. One warp per (head, workspace row).
constexpr int kFinalizeWarps = 8;

template <typename T>
__global__ void __launch_bounds__(kFinalizeWarps * kWarpSize)
    fa1_forward_finalize_kernel(AttnParams p, ForwardWorkspace ws, int ws_head_dim) {
  const int64_t item = int64_t(blockIdx.x) * kFinalizeWarps + threadIdx.x / kWarpSize;
  if (item >= ws.rows * p.heads_q) return;
  int head;
  int64_t b, i;
  workspace_item(p, ws.rows, item, &head, &b, &i);
  const float l = ws.l[item];
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  const float* o = ws.o + item * ws_head_dim;
  T* out = static_cast<T*>(p.out.ptr) + b * p.out.batch_stride + i * p.out.row_stride + int64_t(head) * p.out.head_stride;
  for (int c = lane_id(); c < p.head_dim; c += kWarpSize) out[c] = T(o[c] * inv_l);
  if (p.lse.ptr != nullptr && lane_id() == 0) {
    float* lse = static_cast<float*>(p.lse.ptr) + b * p.lse.batch_stride + int64_t(head) * p.lse.head_stride +
                 i * p.lse.row_stride;
    *lse = l > 0.0f ? (ws.m[item] + log2f(l)) * core::kLn2 : core::kNegInf;
  }
}

}  // namespace flashattn::cuda::fa1
