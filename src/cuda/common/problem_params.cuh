// A plain-old-data copy of detail::Problem that kernels take by value.
#pragma once

#include <cuda_runtime.h>  // __device__ where host-only .cpp files include this header

#include <array>
#include <cstdint>

#include "api/kvcache_problem.h"
#include "api/problem.h"
#include "core/mask.h"
#include "core/numeric.h"

namespace flashattn::cuda {

struct TensorParams {
  void* ptr;
  int64_t batch_stride, row_stride, head_stride;  // elements
};

struct AttnParams {
  TensorParams q, k, v, out, lse;
  TensorParams dout, dq, dk, dv;  // backward only
  const int32_t* cu_q;           // varlen: device prefix sums, else nullptr
  const int32_t* cu_k;
  int batch, heads_q, heads_kv, head_dim;
  int seqlen_q, seqlen_k;  // padded lengths, or the varlen maxima
  float scale;             // softmax scale
  float scale_log2;        // scale * log2(e): scores in log2 units
  float softcap;           // 0 = off
  // Scores in the fa2 forward's units times this are log2 units: raw dot products (scale_log2) with a
  // positive scale and no softcap, c * tanh(s * scale / c) (log2(e)) with a softcap c, s * scale_log2 (1)
  // with a negative scale. A kernel parameter, so the exponent's FFMA reads it from constant memory.
  float score_mult;
  bool causal;
  int window_left, window_right;  // -1 = unbounded

  // Row offset of sequence b in the packed tensors, and its lengths.
  __device__ __forceinline__ int q_offset(int b) const { return cu_q ? cu_q[b] : 0; }
  __device__ __forceinline__ int k_offset(int b) const { return cu_k ? cu_k[b] : 0; }
  __device__ __forceinline__ int len_q(int b) const { return cu_q ? cu_q[b + 1] - cu_q[b] : seqlen_q; }
  __device__ __forceinline__ int len_k(int b) const { return cu_k ? cu_k[b + 1] - cu_k[b] : seqlen_k; }
  __device__ __forceinline__ core::MaskSpec mask(int b) const {
    return core::MaskSpec::make(len_q(b), len_k(b), causal, window_left, window_right);
  }
  // The same mask in 32-bit arithmetic, from lengths the kernel already holds.
  __device__ __forceinline__ core::MaskSpec32 mask32(int len_q, int len_k) const {
    return core::MaskSpec32::make(len_q, len_k, causal, window_left, window_right);
  }
};

// A KV cache (elements): outer = between sequences (contiguous cache) or between pages (paged cache).
struct CacheParams {
  void* ptr;
  int64_t outer_stride, row_stride, head_stride;
};

inline CacheParams to_params(const detail::CacheStrided& c) {
  return CacheParams{c.ptr, c.outer_stride, c.row_stride, c.head_stride};
}

inline TensorParams to_params(const detail::Strided& s) {
  return TensorParams{s.ptr, s.batch_stride, s.row_stride, s.head_stride};
}

// The forward's strided tensors with the extents their row and head strides step over (varlen tensors are
// one "batch" of total rows): what a kernel's alignment and addressing checks walk.
struct ForwardOperand {
  const char* name;
  const detail::Strided* s;
  int64_t rows, heads;
};
inline std::array<ForwardOperand, 4> forward_operands(const detail::Problem& p) {
  const int64_t q_rows = p.varlen ? p.total_q : p.seqlen_q;
  const int64_t k_rows = p.varlen ? p.total_k : p.seqlen_k;
  return {{{"q", &p.q, q_rows, p.heads_q},
           {"k", &p.k, k_rows, p.heads_kv},
           {"v", &p.v, k_rows, p.heads_kv},
           {"out", &p.out, q_rows, p.heads_q}}};
}

inline AttnParams make_params(const detail::Problem& p) {
  AttnParams a{};
  a.q = to_params(p.q);
  a.k = to_params(p.k);
  a.v = to_params(p.v);
  a.out = to_params(p.out);
  a.lse = to_params(p.lse);
  a.dout = to_params(p.dout);
  a.dq = to_params(p.dq);
  a.dk = to_params(p.dk);
  a.dv = to_params(p.dv);
  a.cu_q = p.varlen ? p.device_cu_q : nullptr;
  a.cu_k = p.varlen ? p.device_cu_k : nullptr;
  a.batch = int(p.batch);
  a.heads_q = int(p.heads_q);
  a.heads_kv = int(p.heads_kv);
  a.head_dim = int(p.head_dim);
  a.seqlen_q = int(p.seqlen_q);
  a.seqlen_k = int(p.seqlen_k);
  a.scale = p.scale;
  a.scale_log2 = p.scale * core::kLog2e;
  a.softcap = p.softcap;
  a.score_mult = p.softcap > 0.0f ? core::kLog2e : (a.scale_log2 > 0.0f ? a.scale_log2 : 1.0f);
  a.causal = p.causal;
  a.window_left = int(p.window_left);
  a.window_right = int(p.window_right);
  return a;
}

}  // namespace flashattn::cuda
