// fp16 -> fp32 rows: F16C on x86-64 CPUs that have it, the portable scalar conversion elsewhere.
#include "cpu/convert.h"

#include "core/numeric.h"

// FLASHATTN_CPU_PORTABLE_ONLY builds only the portable code (to test it on a machine with F16C).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FLASHATTN_CPU_PORTABLE_ONLY)
#define FLASHATTN_CPU_F16C_DISPATCH 1
#include <immintrin.h>
#endif

namespace flashattn::detail::cpu {
namespace {

void fp16_to_float_portable(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = core::fp16_bits_to_float(src[i]);
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

bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}
#endif

}  // namespace

void fp16_to_float_row(const uint16_t* src, int64_t n, float* dst) {
#ifdef FLASHATTN_CPU_F16C_DISPATCH
  if (cpu_has_f16c()) {
    fp16_to_float_f16c(src, n, dst);
    return;
  }
#endif
  fp16_to_float_portable(src, n, dst);
}

}  // namespace flashattn::detail::cpu
