// Products with K/V cache rows read in place: AVX-512 (BF16 dot products for bf16 rows) on x86-64 CPUs
// that have it, portable loops elsewhere. See cache_rows.h.
#include "cpu/cache_rows.h"

#include <algorithm>
#include <cstring>

#include "core/numeric.h"

// FLASHATTN_CPU_PORTABLE_ONLY builds only the portable code (to test it on a machine with AVX-512).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FLASHATTN_CPU_PORTABLE_ONLY)
#define FLASHATTN_CPU_CACHE_ROWS_X86 1
#include <immintrin.h>
#endif

namespace flashattn::detail::cpu {
namespace {

// Keys per step of the score kernels (4 keys x 4 query rows = one vector of 16 sums) and of P V (each
// accumulator is loaded and stored once per step, so more keys per step make fewer of those).
constexpr int64_t kScoreKeys = 4;
constexpr int64_t kScoreRows = 4;
constexpr int64_t kPvKeys = 8;
constexpr int64_t kPvRows = 4;

int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }

float widen(DType dtype, const char* row, int64_t x) {
  switch (dtype) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, row + x * 4, sizeof v);
      return v;
    }
    case DType::kFloat16:
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, row + x * 2, sizeof h);
      return dtype == DType::kFloat16 ? core::fp16_bits_to_float(h) : core::bf16_bits_to_float(h);
    }
    default:
      return 0.0f;
  }
}

void scores_portable(const CacheBlock& b, const float* q, int64_t m, float alpha, float* s, int64_t s_head_stride,
                     int64_t lds) {
  const int64_t stride = cache_query_stride(CacheRowsImpl::kPortable, b.dtype, b.d);
  for (int64_t i = 0; i < b.keys; ++i)
    for (int64_t h = 0; h < b.heads; ++h) {
      const char* key = b.rows[i] + h * b.head_bytes;
      for (int64_t r = 0; r < m; ++r) {
        const float* qr = q + (h * m + r) * stride;
        float sum = 0.0f;
        for (int64_t x = 0; x < b.d; ++x) sum += qr[x] * widen(b.dtype, key, x);
        s[h * s_head_stride + r * lds + i] = alpha * sum;
      }
    }
}

void accumulate_portable(const CacheBlock& b, const float* p, int64_t p_head_stride, int64_t ldp, int64_t m,
                         float* o, int64_t o_head_stride) {
  for (int64_t i = 0; i < b.keys; ++i)
    for (int64_t h = 0; h < b.heads; ++h) {
      const char* value = b.rows[i] + h * b.head_bytes;
      for (int64_t r = 0; r < m; ++r) {
        const float pr = p[h * p_head_stride + r * ldp + i];
        float* orow = o + h * o_head_stride + r * b.d;
        for (int64_t x = 0; x < b.d; ++x) orow[x] += pr * widen(b.dtype, value, x);
      }
    }
}

#ifdef FLASHATTN_CPU_CACHE_ROWS_X86
#define FA_AVX512 "avx512f,avx512bw,avx512vl"
#define FA_AVX512_BF16 "avx512f,avx512bw,avx512vl,avx512bf16"

// GCC 12 warns that the AVX-512 intrinsics' own placeholder operand (_mm512_undefined_*) may be used
// uninitialized; it is never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// 16 fp32 lanes of a row from element x on, the lanes outside `mask` zero.
template <DType D>
__attribute__((target(FA_AVX512), always_inline)) inline __m512 load16(const char* row, int64_t x, __mmask16 mask) {
  if constexpr (D == DType::kFloat32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + x);
  } else if constexpr (D == DType::kFloat16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + x));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + x);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

__attribute__((target(FA_AVX512), always_inline)) inline __mmask16 lanes_mask(int64_t lanes) {
  return lanes >= 16 ? __mmask16(0xFFFF) : lanes <= 0 ? __mmask16(0) : __mmask16((1u << lanes) - 1);
}

// v[j] = sum of the 16 lanes of a[j], for j < 16: pairs of vectors folded into one at each level (lanes
// within 128-bit blocks, then the blocks), 15 adds and 30 shuffles for all 16 sums.
__attribute__((target(FA_AVX512), always_inline)) inline __m512 sum_lanes16(const __m512* a) {
  __m512 t[8], u[4], v[2];
  for (int j = 0; j < 8; ++j)
    t[j] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * j], a[2 * j + 1]), _mm512_unpackhi_ps(a[2 * j], a[2 * j + 1]));
  for (int j = 0; j < 4; ++j)
    u[j] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * j], t[2 * j + 1], 0x44), _mm512_shuffle_ps(t[2 * j], t[2 * j + 1], 0xEE));
  for (int j = 0; j < 2; ++j)
    v[j] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], 0x44),
                         _mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88), _mm512_shuffle_f32x4(v[0], v[1], 0xDD));
}

// Lane r * 4 + k of `sums` is the score of query row r and key k: rows < nr, keys < nk go to s.
__attribute__((target(FA_AVX512), always_inline)) inline void store_scores(__m512 sums, int64_t nr, int64_t nk,
                                                                           float* s, int64_t lds) {
  if (nr == kScoreRows && nk == kScoreKeys) {
    _mm_storeu_ps(s, _mm512_castps512_ps128(sums));
    _mm_storeu_ps(s + lds, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(s + 2 * lds, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(s + 3 * lds, _mm512_extractf32x4_ps(sums, 3));
    return;
  }
  alignas(64) float lane[16];
  _mm512_store_ps(lane, sums);
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t k = 0; k < nk; ++k) s[r * lds + k] = lane[r * kScoreKeys + k];
}

// Element offsets of the query rows r0 .. r0 + 3 within a head's packed rows; rows past m repeat the last
// one (their sums are never stored).
inline void query_offsets(int64_t r0, int64_t nr, int64_t stride, int64_t* off) {
  for (int64_t r = 0; r < kScoreRows; ++r) off[r] = (r0 + std::min(r, nr - 1)) * stride;
}

// The score kernels: blocks of 4 query rows outside (one block at decode's usual 1-4 rows), then steps of
// 4 keys, then the heads (the rows of a key's heads lie together). kChunks > 0: head_dim is exactly that
// many vectors (no masks, loop unrolled); 0: any head_dim, the last vector masked.
template <DType D, int kChunks>
__attribute__((target(FA_AVX512))) void scores_avx512(const CacheBlock& b, const float* q, int64_t m, float alpha,
                                                      float* s, int64_t s_head_stride, int64_t lds) {
  const int64_t stride = round_up(b.d, 16);
  const int64_t chunks = kChunks > 0 ? kChunks : stride / 16;
  const __mmask16 tail = lanes_mask(b.d - (chunks - 1) * 16);
  const __m512 scale = _mm512_set1_ps(alpha);
  for (int64_t r0 = 0; r0 < m; r0 += kScoreRows) {
    const int64_t nr = std::min(kScoreRows, m - r0);
    int64_t qoff[kScoreRows];
    query_offsets(r0, nr, stride, qoff);
    for (int64_t i0 = 0; i0 < b.keys; i0 += kScoreKeys) {
      const int64_t nk = std::min(kScoreKeys, b.keys - i0);
      const char* key[kScoreKeys];
      for (int64_t k = 0; k < kScoreKeys; ++k) key[k] = b.rows[i0 + std::min(k, nk - 1)];
      for (int64_t h = 0; h < b.heads; ++h) {
        const int64_t hoff = h * b.head_bytes;
        const float* qh = q + h * m * stride;
        __m512 acc[kScoreRows * kScoreKeys];
        for (__m512& a : acc) a = _mm512_setzero_ps();
        for (int64_t c = 0; c < chunks; ++c) {
          const __mmask16 mask = kChunks > 0 || c + 1 < chunks ? __mmask16(0xFFFF) : tail;
          __m512 kv[kScoreKeys];
          for (int64_t k = 0; k < kScoreKeys; ++k) kv[k] = load16<D>(key[k] + hoff, c * 16, mask);
          for (int64_t r = 0; r < kScoreRows; ++r) {
            const __m512 qv = _mm512_loadu_ps(qh + qoff[r] + c * 16);  // zero-padded to `stride`
            for (int64_t k = 0; k < kScoreKeys; ++k)
              acc[r * kScoreKeys + k] = _mm512_fmadd_ps(qv, kv[k], acc[r * kScoreKeys + k]);
          }
        }
        store_scores(_mm512_mul_ps(sum_lanes16(acc), scale), nr, nk, s + h * s_head_stride + r0 * lds + i0, lds);
      }
    }
  }
}

// bf16 rows: each dot-product instruction multiplies 16 pairs of bf16 values and adds both products to
// the fp32 lane, so a K row is read as it is stored. The query rows are bf16 too (cache_query_pack).
template <int kChunks>
__attribute__((target(FA_AVX512_BF16))) void scores_avx512_bf16(const CacheBlock& b, const uint16_t* q, int64_t m,
                                                               float alpha, float* s, int64_t s_head_stride,
                                                               int64_t lds) {
  const int64_t stride = round_up(b.d, 32);
  const int64_t chunks = kChunks > 0 ? kChunks : stride / 32;
  const int64_t tail_lanes = b.d - (chunks - 1) * 32;
  const __mmask32 tail = tail_lanes >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << tail_lanes) - 1);
  const __m512 scale = _mm512_set1_ps(alpha);
  for (int64_t r0 = 0; r0 < m; r0 += kScoreRows) {
    const int64_t nr = std::min(kScoreRows, m - r0);
    int64_t qoff[kScoreRows];
    query_offsets(r0, nr, stride, qoff);
    for (int64_t i0 = 0; i0 < b.keys; i0 += kScoreKeys) {
      const int64_t nk = std::min(kScoreKeys, b.keys - i0);
      const char* key[kScoreKeys];
      for (int64_t k = 0; k < kScoreKeys; ++k) key[k] = b.rows[i0 + std::min(k, nk - 1)];
      for (int64_t h = 0; h < b.heads; ++h) {
        const int64_t hoff = h * b.head_bytes;
        const uint16_t* qh = q + h * m * stride;
        __m512 acc[kScoreRows * kScoreKeys];
        for (__m512& a : acc) a = _mm512_setzero_ps();
        for (int64_t c = 0; c < chunks; ++c) {
          const __mmask32 mask = kChunks > 0 || c + 1 < chunks ? __mmask32(0xFFFFFFFFu) : tail;
          __m512bh kv[kScoreKeys];
          for (int64_t k = 0; k < kScoreKeys; ++k)
            kv[k] = (__m512bh)_mm512_maskz_loadu_epi16(mask, key[k] + hoff + c * 64);
          for (int64_t r = 0; r < kScoreRows; ++r) {
            const __m512bh qv = (__m512bh)_mm512_loadu_si512(qh + qoff[r] + c * 32);
            for (int64_t k = 0; k < kScoreKeys; ++k)
              acc[r * kScoreKeys + k] = _mm512_dpbf16_ps(acc[r * kScoreKeys + k], qv, kv[k]);
          }
        }
        store_scores(_mm512_mul_ps(sum_lanes16(acc), scale), nr, nk, s + h * s_head_stride + r0 * lds + i0, lds);
      }
    }
  }
}

// P V: blocks of 4 rows outside, then steps of kPvKeys keys, then the heads; per head 64 columns at a time
// in 16 fp32 accumulators (4 rows x 4 vectors), each V row widened once per step and column block. Rows
// past m read a zero probability and their accumulators are never stored. kBlocks > 0: head_dim is exactly
// that many 64-column blocks (no masks); 0: any head_dim.
template <DType D, int kBlocks>
__attribute__((target(FA_AVX512))) void accumulate_avx512(const CacheBlock& b, const float* p, int64_t p_head_stride,
                                                          int64_t ldp, int64_t m, float* o, int64_t o_head_stride) {
  static const float kZeros[kPvKeys] = {};
  const int64_t blocks = kBlocks > 0 ? kBlocks : (b.d + 63) / 64;
  for (int64_t r0 = 0; r0 < m; r0 += kPvRows) {
    const int64_t nr = std::min(kPvRows, m - r0);
    for (int64_t i0 = 0; i0 < b.keys; i0 += kPvKeys) {
      const int64_t nk = std::min(kPvKeys, b.keys - i0);
      const char* const* value = b.rows + i0;
      for (int64_t h = 0; h < b.heads; ++h) {
        const int64_t hoff = h * b.head_bytes;
        const float* pr[kPvRows];
        float* orow[kPvRows];
        for (int64_t r = 0; r < kPvRows; ++r) {
          pr[r] = r < nr ? p + h * p_head_stride + (r0 + r) * ldp + i0 : kZeros;
          orow[r] = o + h * o_head_stride + (r0 + std::min(r, nr - 1)) * b.d;
        }
        for (int64_t xb = 0; xb < blocks; ++xb) {
          const int64_t x0 = xb * 64;
          __mmask16 mask[4];
          for (int c = 0; c < 4; ++c) mask[c] = kBlocks > 0 ? __mmask16(0xFFFF) : lanes_mask(b.d - x0 - 16 * c);
          __m512 acc[kPvRows][4];
          for (int64_t r = 0; r < kPvRows; ++r)
            for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_maskz_loadu_ps(mask[c], orow[r] + x0 + 16 * c);
          for (int64_t k = 0; k < nk; ++k) {
            __m512 vv[4];
            for (int c = 0; c < 4; ++c) vv[c] = load16<D>(value[k] + hoff, x0 + 16 * c, mask[c]);
            for (int64_t r = 0; r < kPvRows; ++r) {
              const __m512 pv = _mm512_set1_ps(pr[r][k]);
              for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(pv, vv[c], acc[r][c]);
            }
          }
          // Rows past nr alias row nr - 1 and carry its unchanged copy: store the real rows only.
          for (int64_t r = 0; r < nr; ++r)
            for (int c = 0; c < 4; ++c) _mm512_mask_storeu_ps(orow[r] + x0 + 16 * c, mask[c], acc[r][c]);
        }
      }
    }
  }
}

// bf16 V rows whose head_dim is whole 64-column blocks: one 64-byte load gives 32 values, the even ones
// widened by a shift and the odd ones by a mask, so the accumulators hold each 32-column group as its 16
// even columns, then its 16 odd ones (cache_output_interleaved). Otherwise as accumulate_avx512.
template <int kBlocks>
__attribute__((target(FA_AVX512))) void accumulate_avx512_bf16_pairs(const CacheBlock& b, const float* p,
                                                                     int64_t p_head_stride, int64_t ldp, int64_t m,
                                                                     float* o, int64_t o_head_stride) {
  static const float kZeros[kPvKeys] = {};
  const __m512i high = _mm512_set1_epi32(int(0xFFFF0000u));
  for (int64_t r0 = 0; r0 < m; r0 += kPvRows) {
    const int64_t nr = std::min(kPvRows, m - r0);
    for (int64_t i0 = 0; i0 < b.keys; i0 += kPvKeys) {
      const int64_t nk = std::min(kPvKeys, b.keys - i0);
      const char* const* value = b.rows + i0;
      for (int64_t h = 0; h < b.heads; ++h) {
        const int64_t hoff = h * b.head_bytes;
        const float* pr[kPvRows];
        float* orow[kPvRows];
        for (int64_t r = 0; r < kPvRows; ++r) {
          pr[r] = r < nr ? p + h * p_head_stride + (r0 + r) * ldp + i0 : kZeros;
          orow[r] = o + h * o_head_stride + (r0 + std::min(r, nr - 1)) * b.d;
        }
        for (int64_t xb = 0; xb < kBlocks; ++xb) {
          const int64_t x0 = xb * 64;
          __m512 acc[kPvRows][4];
          for (int64_t r = 0; r < kPvRows; ++r)
            for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_loadu_ps(orow[r] + x0 + 16 * c);
          for (int64_t k = 0; k < nk; ++k) {
            const char* row = value[k] + hoff + x0 * 2;
            const __m512i w0 = _mm512_loadu_si512(row), w1 = _mm512_loadu_si512(row + 64);
            const __m512 vv[4] = {_mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)),
                                  _mm512_castsi512_ps(_mm512_and_si512(w0, high)),
                                  _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)),
                                  _mm512_castsi512_ps(_mm512_and_si512(w1, high))};
            for (int64_t r = 0; r < kPvRows; ++r) {
              const __m512 pv = _mm512_set1_ps(pr[r][k]);
              for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(pv, vv[c], acc[r][c]);
            }
          }
          for (int64_t r = 0; r < nr; ++r)
            for (int c = 0; c < 4; ++c) _mm512_storeu_ps(orow[r] + x0 + 16 * c, acc[r][c]);
        }
      }
    }
  }
}

template <DType D>
void scores_avx512_any(const CacheBlock& b, const float* q, int64_t m, float alpha, float* s, int64_t shs, int64_t lds) {
  switch (b.d) {
    case 64: return scores_avx512<D, 4>(b, q, m, alpha, s, shs, lds);
    case 128: return scores_avx512<D, 8>(b, q, m, alpha, s, shs, lds);
    case 256: return scores_avx512<D, 16>(b, q, m, alpha, s, shs, lds);
    default: return scores_avx512<D, 0>(b, q, m, alpha, s, shs, lds);
  }
}

void scores_avx512_bf16_any(const CacheBlock& b, const uint16_t* q, int64_t m, float alpha, float* s, int64_t shs,
                            int64_t lds) {
  switch (b.d) {
    case 64: return scores_avx512_bf16<2>(b, q, m, alpha, s, shs, lds);
    case 128: return scores_avx512_bf16<4>(b, q, m, alpha, s, shs, lds);
    case 256: return scores_avx512_bf16<8>(b, q, m, alpha, s, shs, lds);
    default: return scores_avx512_bf16<0>(b, q, m, alpha, s, shs, lds);
  }
}

template <DType D>
void accumulate_avx512_any(const CacheBlock& b, const float* p, int64_t phs, int64_t ldp, int64_t m, float* o,
                           int64_t ohs) {
  if constexpr (D == DType::kBFloat16) {
    switch (b.d) {
      case 64: return accumulate_avx512_bf16_pairs<1>(b, p, phs, ldp, m, o, ohs);
      case 128: return accumulate_avx512_bf16_pairs<2>(b, p, phs, ldp, m, o, ohs);
      case 256: return accumulate_avx512_bf16_pairs<4>(b, p, phs, ldp, m, o, ohs);
      default: break;
    }
  }
  switch (b.d) {
    case 64: return accumulate_avx512<D, 1>(b, p, phs, ldp, m, o, ohs);
    case 128: return accumulate_avx512<D, 2>(b, p, phs, ldp, m, o, ohs);
    case 256: return accumulate_avx512<D, 4>(b, p, phs, ldp, m, o, ohs);
    default: return accumulate_avx512<D, 0>(b, p, phs, ldp, m, o, ohs);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

bool cpu_has_avx512_bf16() {
  static const bool has = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  return has;
}
#endif

// The impl that runs for `impl` on rows of `dtype`: kAvx512Bf16 on other dtypes runs kAvx512; one this
// CPU lacks runs the portable loops.
CacheRowsImpl effective(CacheRowsImpl impl, DType dtype) {
  if (impl == CacheRowsImpl::kAvx512Bf16 && dtype != DType::kBFloat16) impl = CacheRowsImpl::kAvx512;
  return cache_rows_impl_available(impl) ? impl : CacheRowsImpl::kPortable;
}

}  // namespace

const char* cache_rows_impl_name(CacheRowsImpl impl) {
  switch (impl) {
    case CacheRowsImpl::kAvx512Bf16: return "avx512bf16";
    case CacheRowsImpl::kAvx512: return "avx512";
    case CacheRowsImpl::kPortable: return "portable";
  }
  return "portable";
}

bool cache_rows_impl_available(CacheRowsImpl impl) {
#ifdef FLASHATTN_CPU_CACHE_ROWS_X86
  if (impl == CacheRowsImpl::kAvx512Bf16) return cpu_has_avx512_bf16();
  if (impl == CacheRowsImpl::kAvx512) return cpu_has_avx512();
#endif
  return impl == CacheRowsImpl::kPortable;
}

CacheRowsImpl cache_rows_best_impl(DType dtype) { return effective(CacheRowsImpl::kAvx512Bf16, dtype); }

int64_t cache_query_stride(CacheRowsImpl impl, DType dtype, int64_t d) {
  switch (effective(impl, dtype)) {
    case CacheRowsImpl::kAvx512Bf16: return round_up(d, 32);
    case CacheRowsImpl::kAvx512: return round_up(d, 16);
    case CacheRowsImpl::kPortable: return d;
  }
  return d;
}

int64_t cache_query_elem_bytes(CacheRowsImpl impl, DType dtype) {
  return effective(impl, dtype) == CacheRowsImpl::kAvx512Bf16 ? 2 : 4;
}

void cache_query_pack(CacheRowsImpl impl, DType dtype, const float* q, int64_t q_head_stride, int64_t heads,
                      int64_t rows, int64_t d, void* dst) {
  const int64_t stride = cache_query_stride(impl, dtype, d);
  const bool bf16 = cache_query_elem_bytes(impl, dtype) == 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = q + h * q_head_stride + r * d;
      const int64_t at = (h * rows + r) * stride;
      if (bf16) {
        uint16_t* row = static_cast<uint16_t*>(dst) + at;
        for (int64_t x = 0; x < d; ++x) row[x] = core::float_to_bf16_bits(src[x]);
        std::fill(row + d, row + stride, uint16_t(0));
      } else {
        float* row = static_cast<float*>(dst) + at;
        std::copy(src, src + d, row);
        std::fill(row + d, row + stride, 0.0f);
      }
    }
}

bool cache_output_interleaved(CacheRowsImpl impl, DType dtype, int64_t d) {
  const CacheRowsImpl e = effective(impl, dtype);
  return dtype == DType::kBFloat16 && (e == CacheRowsImpl::kAvx512Bf16 || e == CacheRowsImpl::kAvx512) &&
         (d == 64 || d == 128 || d == 256);
}

void cache_output_deinterleave(const float* src, int64_t d, float* dst) {
  for (int64_t g = 0; g < d; g += 32)
    for (int64_t j = 0; j < 16; ++j) {
      dst[g + 2 * j] = src[g + j];
      dst[g + 2 * j + 1] = src[g + 16 + j];
    }
}

void cache_scores(CacheRowsImpl impl, const CacheBlock& block, const void* q, int64_t m, float alpha, float* s,
                  int64_t s_head_stride, int64_t lds) {
  if (block.keys <= 0 || m <= 0) return;
  const float* qf = static_cast<const float*>(q);
  switch (effective(impl, block.dtype)) {
#ifdef FLASHATTN_CPU_CACHE_ROWS_X86
    case CacheRowsImpl::kAvx512Bf16:
      return scores_avx512_bf16_any(block, static_cast<const uint16_t*>(q), m, alpha, s, s_head_stride, lds);
    case CacheRowsImpl::kAvx512:
      if (block.dtype == DType::kFloat32) return scores_avx512_any<DType::kFloat32>(block, qf, m, alpha, s, s_head_stride, lds);
      if (block.dtype == DType::kFloat16) return scores_avx512_any<DType::kFloat16>(block, qf, m, alpha, s, s_head_stride, lds);
      return scores_avx512_any<DType::kBFloat16>(block, qf, m, alpha, s, s_head_stride, lds);
#endif
    default:
      return scores_portable(block, qf, m, alpha, s, s_head_stride, lds);
  }
}

void cache_accumulate(CacheRowsImpl impl, const CacheBlock& block, const float* p, int64_t p_head_stride,
                      int64_t ldp, int64_t m, float* o, int64_t o_head_stride) {
  if (block.keys <= 0 || m <= 0) return;
  switch (effective(impl, block.dtype)) {
#ifdef FLASHATTN_CPU_CACHE_ROWS_X86
    case CacheRowsImpl::kAvx512Bf16:
    case CacheRowsImpl::kAvx512:
      if (block.dtype == DType::kFloat32)
        return accumulate_avx512_any<DType::kFloat32>(block, p, p_head_stride, ldp, m, o, o_head_stride);
      if (block.dtype == DType::kFloat16)
        return accumulate_avx512_any<DType::kFloat16>(block, p, p_head_stride, ldp, m, o, o_head_stride);
      return accumulate_avx512_any<DType::kBFloat16>(block, p, p_head_stride, ldp, m, o, o_head_stride);
#endif
    default:
      return accumulate_portable(block, p, p_head_stride, ldp, m, o, o_head_stride);
  }
}

}  // namespace flashattn::detail::cpu
