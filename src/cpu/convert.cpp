// fp16 and bf16 -> fp32 rows: AVX-512, AVX2 or F16C on x86-64 CPUs that have them, the portable scalar
// conversions elsewhere.
#include "cpu/convert.h"

#include "core/numeric.h"

// FLASHATTN_CPU_PORTABLE_ONLY builds only the portable code (to test it on a machine with the extensions).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FLASHATTN_CPU_PORTABLE_ONLY)
#define FLASHATTN_CPU_F16C_DISPATCH 1
#include <immintrin.h>
#endif

namespace flashattn::detail::cpu {
namespace {

void fp16_to_float_portable(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = core::fp16_bits_to_float(src[i]);
}

void bf16_to_float_portable(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = core::bf16_bits_to_float(src[i]);
}

#ifdef FLASHATTN_CPU_F16C_DISPATCH
__attribute__((target("avx,f16c"))) void fp16_to_float_f16c(const uint16_t* src, int64_t n, float* dst) {
  constexpr int64_t kWidth = 8;
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  fp16_to_float_portable(src + i, n - i, dst + i);
}

// A bf16 value is the top half of the fp32 one: widen each 16-bit lane and shift it up.
__attribute__((target("avx2"))) void bf16_to_float_avx2(const uint16_t* src, int64_t n, float* dst) {
  constexpr int64_t kWidth = 8;
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  bf16_to_float_portable(src + i, n - i, dst + i);
}

// GCC 12 warns that the AVX-512 intrinsics' own placeholder operand (_mm512_undefined_*) may be used
// uninitialized; it is never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) void fp16_to_float_avx512(const uint16_t* src, int64_t n, float* dst) {
  constexpr int64_t kWidth = 16;
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  fp16_to_float_portable(src + i, n - i, dst + i);
}

__attribute__((target("avx512f"))) void bf16_to_float_avx512(const uint16_t* src, int64_t n, float* dst) {
  constexpr int64_t kWidth = 16;
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  bf16_to_float_portable(src + i, n - i, dst + i);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

using ConvertRow = void (*)(const uint16_t*, int64_t, float*);

ConvertRow pick_fp16() {
#ifdef FLASHATTN_CPU_F16C_DISPATCH
  if (__builtin_cpu_supports("avx512f")) return &fp16_to_float_avx512;
  if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c")) return &fp16_to_float_f16c;
#endif
  return &fp16_to_float_portable;
}

ConvertRow pick_bf16() {
#ifdef FLASHATTN_CPU_F16C_DISPATCH
  if (__builtin_cpu_supports("avx512f")) return &bf16_to_float_avx512;
  if (__builtin_cpu_supports("avx2")) return &bf16_to_float_avx2;
#endif
  return &bf16_to_float_portable;
}

}  // namespace

void fp16_to_float_row(const uint16_t* src, int64_t n, float* dst) {
  static const ConvertRow convert = pick_fp16();
  convert(src, n, dst);
}

void bf16_to_float_row(const uint16_t* src, int64_t n, float* dst) {
  static const ConvertRow convert = pick_bf16();
  convert(src, n, dst);
}

}  // namespace flashattn::detail::cpu
