// The hot row loops of the CPU kernels as explicit 8-wide vector code (GCC/Clang vector extensions).
// The baseline build runs them as pairs of SSE2/NEON operations; on x86-64 Linux a second AVX2 copy
// is selected at load time (ifunc), so the library still runs on any x86-64.
#include "cpu/row_ops.h"

#include <cstring>

// FLASHATTN_CPU_PORTABLE_ONLY builds only the baseline variant (to test it on a machine with AVX2).
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(FLASHATTN_CPU_PORTABLE_ONLY)
#define FLASHATTN_ROW_CLONES __attribute__((target_clones("avx2", "default")))
#define FLASHATTN_ROW_CLONES_ENABLED 1
#else
#define FLASHATTN_ROW_CLONES
#endif

namespace flashattn::detail::cpu {
namespace {

constexpr int kWidth = 8;
typedef float F8 __attribute__((vector_size(kWidth * sizeof(float))));
typedef int32_t I8 __attribute__((vector_size(kWidth * sizeof(int32_t))));
typedef uint32_t U8 __attribute__((vector_size(kWidth * sizeof(uint32_t))));

// Vector values cross function boundaries only by reference: passing a 32-byte vector by value has a
// different ABI in the AVX2 copy than in the baseline one.
inline void load8(const float* p, F8* v) { std::memcpy(v, p, sizeof *v); }
inline void store8(float* p, const F8& v) { std::memcpy(p, &v, sizeof v); }

template <typename From, typename To>
inline void copy_bits(const From& from, To* to) {
  static_assert(sizeof(To) == sizeof(From), "copy_bits between types of different sizes");
  std::memcpy(to, &from, sizeof *to);
}

// exp2_poly (row_ops.h) of x[l] - shift on 8 lanes: the same operations in the same order, so the
// same bits.
inline void exp2_shift_vec(const float* x, float shift, F8* out) {
  using E = Exp2Poly;
  F8 v;
  load8(x, &v);
  v -= shift;
  const F8 lo = F8{} + E::kMinExp;
  const F8 hi = F8{} + E::kMaxExp;
  const I8 in_range = v >= lo;  // all ones where true; false for NaN and -inf
  F8 xc = v < lo ? lo : v;
  xc = xc > hi ? hi : xc;
  const F8 shifted = xc + E::kRoundMagic;
  const F8 n = shifted - E::kRoundMagic;
  const F8 f = xc - n;
  F8 p = F8{} + E::kC6;
  p = p * f + E::kC5;
  p = p * f + E::kC4;
  p = p * f + E::kC3;
  p = p * f + E::kC2;
  p = p * f + E::kC1;
  p = p * f + E::kC0;
  // Unsigned lanes: the shift and add wrap modulo 2^32 exactly as in exp2_poly.
  U8 n_bits, p_bits, keep;
  copy_bits(shifted, &n_bits);
  copy_bits(p, &p_bits);
  copy_bits(in_range, &keep);
  n_bits -= core::float_to_bits(E::kRoundMagic);
  const U8 result = (p_bits + (n_bits << E::kMantissaBits)) & keep;  // out of range: +0.0
  copy_bits(result, out);
}

inline float sum_lanes(const F8& v) {
  float s = 0.0f;
  for (int l = 0; l < kWidth; ++l) s += v[l];
  return s;
}

}  // namespace

FLASHATTN_ROW_CLONES float row_max(const float* x, int64_t n) {
  float m = core::kNegInf;
  int64_t i = 0;
  if (n >= kWidth) {
    F8 acc, v;
    load8(x, &acc);
    for (i = kWidth; i + kWidth <= n; i += kWidth) {
      load8(x + i, &v);
      acc = v > acc ? v : acc;
    }
    for (int l = 0; l < kWidth; ++l) m = acc[l] > m ? acc[l] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

FLASHATTN_ROW_CLONES float exp2_shift_sum(float* x, int64_t n, float shift) {
  F8 acc{}, e;
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    exp2_shift_vec(x + i, shift, &e);
    store8(x + i, e);
    acc += e;
  }
  float tail = 0.0f;
  for (; i < n; ++i) {
    x[i] = exp2_poly(x[i] - shift);
    tail += x[i];
  }
  return sum_lanes(acc) + tail;
}

FLASHATTN_ROW_CLONES void exp2_shift(float* x, int64_t n, float shift) {
  F8 e;
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    exp2_shift_vec(x + i, shift, &e);
    store8(x + i, e);
  }
  for (; i < n; ++i) x[i] = exp2_poly(x[i] - shift);
}

const char* row_ops_variant() {
#ifdef FLASHATTN_ROW_CLONES_ENABLED
  if (__builtin_cpu_supports("avx2")) return "avx2";
#endif
  return "baseline";
}

}  // namespace flashattn::detail::cpu
