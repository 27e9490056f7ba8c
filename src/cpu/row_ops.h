// Element-wise and reduction loops over one fp32 row of a score or output tile.
//
// The hot ones (max, exp2 and sum) live in row_ops.cpp as explicit vector code, compiled for the
// baseline ISA and, on x86-64 Linux, also for AVX2 and AVX-512 (picked at load time). Every variant
// performs the same operations in the same order without fused multiply-adds (sums in 8 lanes), so they
// round identically: results depend neither on the thread count nor on which variant runs.
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace flashattn::detail::cpu {

// 2^x in fp32 without a libm call. Relative error below 2 ulp.
// x = n + f with n = round(x), f in [-1/2, 1/2]; 2^f by a degree-6 polynomial (the Chebyshev
// interpolant of 2^f on [-1/2, 1/2] in monomial form), 2^n by adding n to the exponent bits.
// Results below 2^-125 flush to 0 (so exp2(-inf) == 0 exactly, and NaN gives 0); x above 127
// saturates at about 2^127. The vector loops in row_ops.cpp compute exactly this, lane by lane.
struct Exp2Poly {
  static constexpr float kMinExp = -125.0f;  // 2^n * p stays a normal float for p >= 1/sqrt(2)
  static constexpr float kMaxExp = 127.0f;
  // Adding 1.5 * 2^23 rounds |x| < 2^22 to an integer (to nearest) held in the low mantissa bits.
  static constexpr float kRoundMagic = 12582912.0f;
  static constexpr float kC0 = 1.000000000e+00f, kC1 = 6.931471825e-01f, kC2 = 2.402265072e-01f,
                         kC3 = 5.550327152e-02f, kC4 = 9.618056938e-03f, kC5 = 1.340042800e-03f,
                         kC6 = 1.546144485e-04f;
  static constexpr int kMantissaBits = 23;
};

inline float exp2_poly(float x) {
  using E = Exp2Poly;
  const bool in_range = x >= E::kMinExp;  // false for NaN and -inf
  float xc = x < E::kMinExp ? E::kMinExp : x;
  xc = xc > E::kMaxExp ? E::kMaxExp : xc;
  const float shifted = xc + E::kRoundMagic;
  const float n = shifted - E::kRoundMagic;
  const float f = xc - n;
  float p = E::kC6;
  p = p * f + E::kC5;
  p = p * f + E::kC4;
  p = p * f + E::kC3;
  p = p * f + E::kC2;
  p = p * f + E::kC1;
  p = p * f + E::kC0;
  // The low mantissa bits of `shifted` hold n (two's complement, offset by the magic's own bits).
  const uint32_t n_bits = core::float_to_bits(shifted) - core::float_to_bits(E::kRoundMagic);
  const float scaled = core::bits_to_float(core::float_to_bits(p) + (n_bits << E::kMantissaBits));
  return in_range ? scaled : 0.0f;
}

// max of x[0, n); -inf for n == 0.
float row_max(const float* x, int64_t n);
// x[i] = 2^(x[i] - shift); returns the sum of the new values (in a fixed order).
float exp2_shift_sum(float* x, int64_t n, float shift);
// x[i] = 2^(x[i] * scale - shift), the product rounded to fp32 first: the bits that scaling x in place and
// then calling exp2_shift_sum would give, without the extra pass (and exp2_shift_sum's loop for a scale of 1).
float exp2_scale_shift_sum(float* x, int64_t n, float scale, float shift);
// x[i] = 2^(x[i] - shift), no sum (backward: the shift is the saved log-sum-exp).
void exp2_shift(float* x, int64_t n, float shift);
// x[i] = 2^(x[i] * scale - shift), no sum: the bits of scaling first, then exp2_shift.
void exp2_scale_shift(float* x, int64_t n, float scale, float shift);
// Which variant of the loops above runs on this CPU: "avx512f", "avx2" or "baseline".
const char* row_ops_variant();

inline void scale_row(float* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

inline void fill_row(float* x, int64_t n, float value) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

// sum of a[i] * b[i] with 8 partial sums (fixed order).
inline float dot_row(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 8;
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += a[i + l] * b[i + l];
  for (int l = 0; i + l < n; ++l) lane[l] += a[i + l] * b[i + l];
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += lane[l];
  return s;
}

}  // namespace flashattn::detail::cpu
