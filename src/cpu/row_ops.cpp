// The hot row loops of the CPU kernels as explicit 8- and 16-wide vector code (GCC/Clang vector
// extensions). The baseline build runs them as SSE2/NEON operations; on x86-64 Linux an AVX2 and an
// AVX-512 copy are selected at load time (ifunc), so the library still runs on any x86-64. The file is
// compiled with -ffp-contract=off (CMakeLists.txt), so no copy fuses a multiply-add.
#include "cpu/row_ops.h"

#include <cstring>

// FLASHATTN_CPU_PORTABLE_ONLY builds only the baseline variant (to test it on a machine with AVX2).
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(FLASHATTN_CPU_PORTABLE_ONLY)
#define FLASHATTN_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define FLASHATTN_ROW_CLONES_ENABLED 1
#else
#define FLASHATTN_ROW_CLONES
#endif

namespace flashattn::detail::cpu {
namespace {

constexpr int kWidth = 8;
typedef float F8 __attribute__((vector_size(kWidth * sizeof(float))));
// The exponentials also run 16 lanes at a time (one zmm register in the AVX-512 copy), their sums still
// 8 lanes wide in the same order.
typedef float F16 __attribute__((vector_size(2 * kWidth * sizeof(float))));

// Integer lanes of the same count as a float vector type.
template <typename V>
struct Lanes {
  typedef int32_t I __attribute__((vector_size(sizeof(V))));
  typedef uint32_t U __attribute__((vector_size(sizeof(V))));
};

// Vector values cross function boundaries only by reference: passing a 32- or 64-byte vector by value has
// a different ABI in the AVX2 and AVX-512 copies than in the baseline one.
template <typename V>
inline void load(const float* p, V* v) {
  std::memcpy(v, p, sizeof *v);
}
template <typename V>
inline void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

template <typename From, typename To>
inline void copy_bits(const From& from, To* to) {
  static_assert(sizeof(To) == sizeof(From), "copy_bits between types of different sizes");
  std::memcpy(to, &from, sizeof *to);
}

// exp2_poly (row_ops.h) of x[l] - shift (of x[l] * scale - shift, each step rounded, when kScaled) on the
// lanes of V: the same operations in the same order, so the same bits.
template <bool kScaled, typename V>
inline void exp2_shift_vec(const float* x, float scale, float shift, V* out) {
  using E = Exp2Poly;
  using I = typename Lanes<V>::I;
  using U = typename Lanes<V>::U;
  V v;
  load(x, &v);
  if (kScaled) v *= scale;
  v -= shift;
  const V lo = V{} + E::kMinExp;
  const V hi = V{} + E::kMaxExp;
  const I in_range = v >= lo;  // all ones where true; false for NaN and -inf
  V xc = v < lo ? lo : v;
  xc = xc > hi ? hi : xc;
  const V shifted = xc + E::kRoundMagic;
  const V n = shifted - E::kRoundMagic;
  const V f = xc - n;
  V p = V{} + E::kC6;
  p = p * f + E::kC5;
  p = p * f + E::kC4;
  p = p * f + E::kC3;
  p = p * f + E::kC2;
  p = p * f + E::kC1;
  p = p * f + E::kC0;
  // Unsigned lanes: the shift and add wrap modulo 2^32 exactly as in exp2_poly.
  U n_bits, p_bits, keep;
  copy_bits(shifted, &n_bits);
  copy_bits(p, &p_bits);
  copy_bits(in_range, &keep);
  n_bits -= core::float_to_bits(E::kRoundMagic);
  const U result = (p_bits + (n_bits << E::kMantissaBits)) & keep;  // out of range: +0.0
  copy_bits(result, out);
}

// The two 8-lane halves of a 16-lane vector.
inline void split_halves(const F16& v, F8* lo, F8* hi) {
  std::memcpy(lo, &v, sizeof *lo);
  std::memcpy(hi, reinterpret_cast<const char*>(&v) + sizeof *lo, sizeof *hi);
}

inline float sum_lanes(const F8& v) {
  float s = 0.0f;
  for (int l = 0; l < kWidth; ++l) s += v[l];
  return s;
}

}  // namespace

// A max does not depend on the order it is taken in, so the row max runs two 16-lane accumulators (no chain
// of dependent comparisons) and a tree reduction: the same value as a scalar loop. (Results go through
// pointers: see load().)
template <typename V>
inline void max_into(const V& v, V* acc) {
  *acc = v > *acc ? v : *acc;
}

inline float max_lanes(const F8& v) {
  typedef float F4 __attribute__((vector_size(4 * sizeof(float))));
  F4 a, b;
  std::memcpy(&a, &v, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&v) + sizeof a, sizeof b);
  max_into(b, &a);
  const float x = a[0] > a[2] ? a[0] : a[2], y = a[1] > a[3] ? a[1] : a[3];
  return x > y ? x : y;
}

FLASHATTN_ROW_CLONES float row_max(const float* x, int64_t n) {
  constexpr int64_t kStep = 4 * kWidth;  // two 16-lane vectors
  float m = core::kNegInf;
  int64_t i = 0;
  if (n >= kStep) {
    F16 acc0, acc1, v;
    load(x, &acc0);
    load(x + 2 * kWidth, &acc1);
    for (i = kStep; i + kStep <= n; i += kStep) {
      load(x + i, &v);
      max_into(v, &acc0);
      load(x + i + 2 * kWidth, &v);
      max_into(v, &acc1);
    }
    max_into(acc1, &acc0);
    F8 lo, hi;
    split_halves(acc0, &lo, &hi);
    max_into(hi, &lo);
    m = max_lanes(lo);
  }
  if (i + kWidth <= n) {
    F8 acc, v;
    load(x + i, &acc);
    for (i += kWidth; i + kWidth <= n; i += kWidth) {
      load(x + i, &v);
      max_into(v, &acc);
    }
    const float part = max_lanes(acc);
    m = part > m ? part : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// The sum runs in 8 lanes, lane l adding x[l], x[l + 8], x[l + 16], ... in that order, whether the
// exponentials were computed 16 or 8 at a time; then the lanes in order, then the scalar tail.
// Always inlined: each clone of its callers must compile it for its own ISA.
template <bool kScaled>
__attribute__((always_inline)) inline float exp2_sum_loop(float* x, int64_t n, float scale, float shift) {
  F8 acc{}, e, e_hi;
  F16 e16;
  int64_t i = 0;
  for (; i + 2 * kWidth <= n; i += 2 * kWidth) {
    exp2_shift_vec<kScaled>(x + i, scale, shift, &e16);
    store(x + i, e16);
    split_halves(e16, &e, &e_hi);
    acc += e;
    acc += e_hi;
  }
  for (; i + kWidth <= n; i += kWidth) {
    exp2_shift_vec<kScaled>(x + i, scale, shift, &e);
    store(x + i, e);
    acc += e;
  }
  float tail = 0.0f;
  for (; i < n; ++i) {
    x[i] = exp2_poly((kScaled ? x[i] * scale : x[i]) - shift);
    tail += x[i];
  }
  return sum_lanes(acc) + tail;
}

FLASHATTN_ROW_CLONES float exp2_shift_sum(float* x, int64_t n, float shift) {
  return exp2_sum_loop</*kScaled=*/false>(x, n, 1.0f, shift);
}

FLASHATTN_ROW_CLONES float exp2_scale_shift_sum(float* x, int64_t n, float scale, float shift) {
  // A scale of 1 changes no bit: the loop without the multiply.
  if (scale == 1.0f) return exp2_sum_loop</*kScaled=*/false>(x, n, 1.0f, shift);
  return exp2_sum_loop</*kScaled=*/true>(x, n, scale, shift);
}

// Always inlined, as exp2_sum_loop.
template <bool kScaled>
__attribute__((always_inline)) inline void exp2_loop(float* x, int64_t n, float scale, float shift) {
  F8 e;
  F16 e16;
  int64_t i = 0;
  for (; i + 2 * kWidth <= n; i += 2 * kWidth) {
    exp2_shift_vec<kScaled>(x + i, scale, shift, &e16);
    store(x + i, e16);
  }
  for (; i + kWidth <= n; i += kWidth) {
    exp2_shift_vec<kScaled>(x + i, scale, shift, &e);
    store(x + i, e);
  }
  for (; i < n; ++i) x[i] = exp2_poly((kScaled ? x[i] * scale : x[i]) - shift);
}

FLASHATTN_ROW_CLONES void exp2_shift(float* x, int64_t n, float shift) {
  exp2_loop</*kScaled=*/false>(x, n, 1.0f, shift);
}

FLASHATTN_ROW_CLONES void exp2_scale_shift(float* x, int64_t n, float scale, float shift) {
  if (scale == 1.0f)
    exp2_loop</*kScaled=*/false>(x, n, 1.0f, shift);
  else
    exp2_loop</*kScaled=*/true>(x, n, scale, shift);
}

const char* row_ops_variant() {
#ifdef FLASHATTN_ROW_CLONES_ENABLED
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2")) return "avx2";
#endif
  return "baseline";
}

}  // namespace flashattn::detail::cpu
