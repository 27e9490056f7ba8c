// Online softmax (FlashAttention): one row's running max and sum, updated one KV tile at a time.
//
// Scores enter in log2 units (s * softmax_scale * log2(e)), so the exponentials are exp2. The output
// accumulator stays unnormalized (deferred normalization, FA2): it is rescaled by exp2(m_old - m_new)
// when the max grows and divided by the sum once, at the end.
#pragma once

#include <cmath>

#include "core/macros.h"
#include "core/numeric.h"

namespace flashattn::core {

// FA4's conditional rescale: keep a stale max while the new one exceeds it by at most this many log2
// units, so exp2(s - m) stays below 2^8 and fp32 accumulators cannot overflow.
constexpr float kRescaleThresholdLog2 = 8.0f;

struct OnlineSoftmaxRow {
  float max_log2 = kNegInf;  // running max of the scores seen, log2 units
  float sum = 0.0f;          // running sum of exp2(score - max_log2)

  // Start a tile whose row max is tile_max_log2. Returns the factor by which the existing sum and
  // output accumulator must be multiplied. The tile's exponentials are then exp2(s - max_log2).
  FA_HOST_DEVICE float begin_tile(float tile_max_log2) {
    float new_max = tile_max_log2 > max_log2 ? tile_max_log2 : max_log2;
    // An unchanged max needs no exp2 (exp2(0) is 1 exactly), and -inf - -inf would be NaN: a row that has
    // seen only masked scores keeps factor 1 and a -inf max.
    float factor = (new_max == max_log2) ? 1.0f : exp2f_host_device(max_log2 - new_max);
    max_log2 = new_max;
    sum *= factor;
    return factor;
  }

  // The max to subtract inside exp2: 0 for a row that has only seen masked scores, so that
  // exp2(-inf - 0) = 0 instead of NaN.
  FA_HOST_DEVICE float safe_max() const { return max_log2 == kNegInf ? 0.0f : max_log2; }

  FA_HOST_DEVICE void add(float tile_sum) { sum += tile_sum; }

  // 1/sum to normalize the output; 0 for a row with no visible key (its output is 0).
  FA_HOST_DEVICE float inv_sum() const { return sum > 0.0f ? 1.0f / sum : 0.0f; }

  // Natural-log log-sum-exp of the scaled scores; -inf for a row with no visible key.
  FA_HOST_DEVICE float lse() const {
    return sum > 0.0f ? (max_log2 + log2f_host_device(sum)) * kLn2 : kNegInf;
  }

  static FA_HOST_DEVICE float exp2f_host_device(float x) {
#if defined(__CUDA_ARCH__)
    return exp2f(x);
#else
    return std::exp2(x);
#endif
  }
  static FA_HOST_DEVICE float log2f_host_device(float x) {
#if defined(__CUDA_ARCH__)
    return log2f(x);
#else
    return std::log2(x);
#endif
  }
};

// Softcap: c * tanh(s / c) on the scaled score s, and its derivative for the backward pass.
FA_HOST_DEVICE float apply_softcap(float s, float cap) {
#if defined(__CUDA_ARCH__)
  return cap * tanhf(s / cap);
#else
  return cap * std::tanh(s / cap);
#endif
}
// d(capped)/d(s) expressed through the capped value t = c * tanh(s / c): 1 - (t / c)^2.
FA_HOST_DEVICE float softcap_grad(float capped, float cap) {
  float t = capped / cap;
  return 1.0f - t * t;
}

// Merge of two partial softmax results of the same row over disjoint key sets (split-KV decode):
// lse = log(exp(lse_a) + exp(lse_b)); each partial output is weighted by exp(lse_i - lse).
FA_HOST_DEVICE float merge_lse(float lse_a, float lse_b) {
  float m = lse_a > lse_b ? lse_a : lse_b;
  if (m == kNegInf) return kNegInf;
#if defined(__CUDA_ARCH__)
  return m + logf(expf(lse_a - m) + expf(lse_b - m));
#else
  return m + std::log(std::exp(lse_a - m) + std::exp(lse_b - m));
#endif
}

}  // namespace flashattn::core
