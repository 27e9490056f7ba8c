// bf16 tile products: AMX with AVX-512 packing on x86-64 Linux, portable loops for the same layout.
#include "cpu/bf16_tiles.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "core/numeric.h"
#include "cpu/row_ops.h"

// FLASHATTN_CPU_PORTABLE_ONLY builds without AMX (to test the rest on a machine that has it). The tile-data
// permission is a Linux system call, so other systems run the fp32 path.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(FLASHATTN_CPU_PORTABLE_ONLY)
#define FLASHATTN_CPU_AMX_BUILD 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace flashattn::detail::cpu {
namespace {

constexpr int64_t kTileRows = 16;      // rows of every tile
constexpr int64_t kTileK = 32;         // bf16 elements of one A row, rows of B per tile
constexpr int64_t kTileCols = 16;      // fp32 columns of C, columns of B per tile
constexpr int64_t kTileElems = 512;    // bf16 elements of one packed B tile (16 rows x 64 bytes)
static_assert(kBf16TileAlign == kTileK && kBf16TileAlign == 2 * kTileCols,
              "the products work on 32 x 32 blocks of C and 32-deep steps of k");

// Element (kk, 2 i + e) of packed tile (kc, nc) of a [k x n] B: B[32 kc + 2 kk + e][16 nc + i].
inline int64_t packed_offset(int64_t k, int64_t row, int64_t col) {
  const int64_t kc = row / kTileK, kk = (row % kTileK) / 2, e = row % 2;
  const int64_t nc = col / kTileCols, i = col % kTileCols;
  return (nc * (k / kTileK) + kc) * kTileElems + kk * kTileK + 2 * i + e;
}

// The portable forms: the definition of each operation, and the emulated products.

void pack_kt_portable(const uint16_t* k, int64_t ldk, int64_t keys, int64_t keys_pad, int64_t d, uint16_t* dst) {
  for (int64_t j = 0; j < d; ++j)
    for (int64_t r = 0; r < keys_pad; ++r) dst[packed_offset(d, j, r)] = r < keys ? k[r * ldk + j] : 0;
}

void pack_v_portable(const uint16_t* v, int64_t ldv, int64_t keys, int64_t keys_pad, int64_t d, uint16_t* dst) {
  for (int64_t r = 0; r < keys_pad; ++r)
    for (int64_t j = 0; j < d; ++j) dst[packed_offset(keys_pad, r, j)] = r < keys ? v[r * ldv + j] : 0;
}

inline void split_value(float v, uint16_t* hi, uint16_t* lo) {
  *hi = core::float_to_bf16_bits(v);
  *lo = core::float_to_bf16_bits(v - core::bf16_bits_to_float(*hi));
}

float exp2_split_row_portable(const float* s, int64_t n_pad, int64_t begin, int64_t end, float scale, float shift,
                              uint16_t* hi, uint16_t* lo) {
  float sum = 0.0f;
  for (int64_t c = 0; c < n_pad; ++c) {
    const float p = c >= begin && c < end ? exp2_poly(s[c] * scale - shift) : 0.0f;
    split_value(p, hi + c, lo + c);
    sum += p;
  }
  return sum;
}

void exp2_ds_row_portable(float* s, float* ds, int64_t n, float scale, float shift, float delta) {
  for (int64_t c = 0; c < n; ++c) {
    s[c] = exp2_poly(s[c] * scale - shift);
    ds[c] = s[c] * (ds[c] - delta);
  }
}

void split_rows_portable(const float* x, int64_t ldx, int64_t rows, int64_t n, int64_t n_pad, uint16_t* hi,
                         uint16_t* lo, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n_pad; ++c) split_value(c < n ? x[r * ldx + c] : 0.0f, hi + r * ld + c, lo + r * ld + c);
}

void fp16_split_rows_portable(const uint16_t* src, int64_t ld, int64_t rows, int64_t d, uint16_t* hi, uint16_t* lo) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < d; ++j) split_value(core::fp16_bits_to_float(src[r * ld + j]), hi + r * d + j, lo + r * d + j);
}

void split_transposed_portable(const float* x, int64_t ldx, int64_t rows, int64_t cols, int64_t rows_pad,
                               int64_t cols_pad, uint16_t* hi, uint16_t* lo, int64_t ld) {
  for (int64_t c = 0; c < cols_pad; ++c)
    for (int64_t r = 0; r < rows_pad; ++r)
      split_value(r < rows && c < cols ? x[r * ldx + c] : 0.0f, hi + c * ld + r, lo + c * ld + r);
}

// Products summed in fp32, term by term, as the tile multiplies do.
void gemm_portable(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* a_lo, int64_t lda,
                   const uint16_t* b, const uint16_t* b_lo, bool accumulate, float* c, int64_t ldc) {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t col = 0; col < n; ++col) {
      float acc = accumulate ? c[r * ldc + col] : 0.0f;
      for (const uint16_t* bv : {b, b_lo})
        for (const uint16_t* av : {a, a_lo}) {
          if (av == nullptr || bv == nullptr || (av == a_lo && bv == b_lo)) continue;
          for (int64_t j = 0; j < k; ++j)
            acc += core::bf16_bits_to_float(av[r * lda + j]) * core::bf16_bits_to_float(bv[packed_offset(k, j, col)]);
        }
      c[r * ldc + col] = acc;
    }
}

#ifdef FLASHATTN_CPU_AMX_BUILD

constexpr unsigned kCpuidAmxBf16 = 1u << 22;     // leaf 7.0 EDX
constexpr unsigned kCpuidAmxTile = 1u << 24;     // leaf 7.0 EDX
constexpr unsigned kCpuidAvx512f = 1u << 16;     // leaf 7.0 EBX
constexpr unsigned kCpuidAvx512bw = 1u << 30;    // leaf 7.0 EBX
constexpr unsigned kCpuidAvx512bf16 = 1u << 5;   // leaf 7.1 EAX
constexpr unsigned kCpuidOsxsave = 1u << 27;     // leaf 1 ECX
constexpr uint64_t kXcr0Avx512 = 0xe6;           // SSE, AVX, opmask, ZMM state enabled by the OS
constexpr uint64_t kXcr0Tiles = 3ull << 17;      // XTILECFG, XTILEDATA
constexpr long kArchReqXcompPerm = 0x1023;       // arch_prctl: ask for an extended state component
constexpr long kXfeatureXtiledata = 18;

uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool detect_amx_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & kCpuidOsxsave)) return false;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool tiles = (edx & kCpuidAmxTile) && (edx & kCpuidAmxBf16);
  const bool avx512 = (ebx & kCpuidAvx512f) && (ebx & kCpuidAvx512bw);
  if (!tiles || !avx512) return false;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) || !(eax & kCpuidAvx512bf16)) return false;
  const uint64_t xcr0 = read_xcr0();
  if ((xcr0 & kXcr0Avx512) != kXcr0Avx512 || (xcr0 & kXcr0Tiles) != kXcr0Tiles) return false;
  // Linux hands out the 8 KiB of tile state per thread only to processes that ask for it.
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The tile configuration (64 bytes, palette 1): all eight tiles 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads exactly 64 bytes");

constexpr TileConfig make_tile_config() {
  TileConfig config;
  constexpr int kTiles = 8;
  for (int t = 0; t < kTiles; ++t) {
    config.bytes_per_row[t] = uint16_t(kTileK * sizeof(uint16_t));
    config.rows[t] = uint8_t(kTileRows);
  }
  return config;
}
// A constant in memory: GCC's ldtilecfg intrinsic declares a read of only 8 bytes of its operand, and the
// stores that filled the rest of a local copy were dropped as dead.
constexpr TileConfig kTileConfig = make_tile_config();

__attribute__((target("amx-tile"))) void load_tile_config() { _tile_loadconfig(&kTileConfig); }

__attribute__((target("amx-tile"))) void release_tiles() { _tile_release(); }

// GCC 12 warns that the AVX-512 intrinsics' own placeholder operand (_mm512_undefined_*) is or may be used
// uninitialized; it is never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// 16 rows of 16 32-bit lanes transposed in registers: rows[i] lane j becomes rows[j] lane i.
__attribute__((target("avx512f"))) inline void transpose_16x16_epi32(__m512i rows[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {  // lane pairs: (r0[0] r1[0] r0[1] r1[1]) per 128-bit lane
    t[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // u[i + j] holds column 4 L + j of rows i..i+3 in 128-bit lane L
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  constexpr int kEven = 0x88, kOdd = 0xdd;  // 128-bit lanes (0, 2) or (1, 3) of each operand
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], kEven);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], kOdd);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], kEven);
    const __m512i w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], kOdd);
    rows[j] = _mm512_shuffle_i32x4(v0, w0, kEven);
    rows[4 + j] = _mm512_shuffle_i32x4(v1, w1, kEven);
    rows[8 + j] = _mm512_shuffle_i32x4(v0, w0, kOdd);
    rows[12 + j] = _mm512_shuffle_i32x4(v1, w1, kOdd);
  }
}

// A pair of bf16 values is one 32-bit lane, so B = K^T in pairs of rows is K transposed in 32-bit lanes:
// 16 keys x 32 dims of K become one tile by a 16 x 16 transpose.
__attribute__((target("avx512f"))) void pack_kt_amx(const uint16_t* k, int64_t ldk, int64_t keys,
                                                       int64_t keys_pad, int64_t d, uint16_t* dst) {
  const int64_t kcs = d / kTileK;
  for (int64_t nc = 0; nc < keys_pad / kTileCols; ++nc)
    for (int64_t kc = 0; kc < kcs; ++kc) {
      __m512i rows[16];
      for (int64_t i = 0; i < kTileCols; ++i) {
        const int64_t r = nc * kTileCols + i;
        rows[i] = r < keys ? _mm512_loadu_si512(k + r * ldk + kc * kTileK) : _mm512_setzero_si512();
      }
      transpose_16x16_epi32(rows);
      uint16_t* tile = dst + (nc * kcs + kc) * kTileElems;
      for (int64_t kk = 0; kk < kTileRows; ++kk) _mm512_storeu_si512(tile + kk * kTileK, rows[kk]);
    }
}

// Row kk of a tile of packed V interleaves V rows 2 kk and 2 kk + 1 element by element: the first 16
// columns of a 32-column chunk go to tile nc, the next 16 to tile nc + 1.
__attribute__((target("avx512f,avx512bw"))) void pack_v_amx(const uint16_t* v, int64_t ldv, int64_t keys,
                                                               int64_t keys_pad, int64_t d, uint16_t* dst) {
  alignas(64) uint16_t low_index[32], high_index[32];
  for (int i = 0; i < 32; ++i) {
    constexpr int kSecond = 32;  // permutex2var indexes the second operand from 32
    low_index[i] = uint16_t(i / 2 + (i % 2 ? kSecond : 0));
    high_index[i] = uint16_t(16 + i / 2 + (i % 2 ? kSecond : 0));
  }
  const __m512i lo_idx = _mm512_load_si512(low_index), hi_idx = _mm512_load_si512(high_index);
  const int64_t kcs = keys_pad / kTileK;
  for (int64_t kc = 0; kc < kcs; ++kc)
    for (int64_t kk = 0; kk < kTileRows; ++kk) {
      const int64_t r0 = kc * kTileK + 2 * kk, r1 = r0 + 1;
      for (int64_t c = 0; c < d; c += kTileK) {
        const __m512i a = r0 < keys ? _mm512_loadu_si512(v + r0 * ldv + c) : _mm512_setzero_si512();
        const __m512i b = r1 < keys ? _mm512_loadu_si512(v + r1 * ldv + c) : _mm512_setzero_si512();
        const int64_t nc = c / kTileCols;
        _mm512_storeu_si512(dst + (nc * kcs + kc) * kTileElems + kk * kTileK, _mm512_permutex2var_epi16(a, lo_idx, b));
        _mm512_storeu_si512(dst + ((nc + 1) * kcs + kc) * kTileElems + kk * kTileK,
                            _mm512_permutex2var_epi16(a, hi_idx, b));
      }
    }
}

// The lanes [0, n) of a 16-lane chunk (all of them for n >= 16, none for n <= 0).
inline __mmask16 first_lanes(int64_t n) {
  constexpr int64_t kWidth = 16;
  return n >= kWidth ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// 16 floats as hi and lo terms at hi, lo.
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline void split_store(__m512 v, uint16_t* hi,
                                                                                            uint16_t* lo) {
  const __m256bh h = _mm512_cvtneps_pbh(v);
  const __m256bh l = _mm512_cvtneps_pbh(_mm512_sub_ps(v, _mm512_cvtpbh_ps(h)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), (__m256i)h);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), (__m256i)l);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void split_rows_amx(const float* x, int64_t ldx,
                                                                             int64_t rows, int64_t n, int64_t n_pad,
                                                                             uint16_t* hi, uint16_t* lo, int64_t ld) {
  constexpr int64_t kWidth = 16;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n_pad; c += kWidth)
      split_store(_mm512_maskz_loadu_ps(first_lanes(n - c), x + r * ldx + c), hi + r * ld + c, lo + r * ld + c);
}

// fp16 rows straight to their two terms (d a multiple of 16).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void fp16_split_rows_amx(const uint16_t* src, int64_t ld,
                                                                               int64_t rows, int64_t d, uint16_t* hi,
                                                                               uint16_t* lo) {
  constexpr int64_t kWidth = 16;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < d; j += kWidth)
      split_store(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + r * ld + j))),
                  hi + r * d + j, lo + r * d + j);
}

// 16 x 16 blocks of x through the 32-bit transpose, each row of the result split as it is stored.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void split_transposed_amx(
    const float* x, int64_t ldx, int64_t rows, int64_t cols, int64_t rows_pad, int64_t cols_pad, uint16_t* hi,
    uint16_t* lo, int64_t ld) {
  constexpr int64_t kWidth = 16;
  for (int64_t r0 = 0; r0 < rows_pad; r0 += kWidth)
    for (int64_t c0 = 0; c0 < cols_pad; c0 += kWidth) {
      const __mmask16 in_cols = first_lanes(cols - c0);
      __m512i block[16];
      for (int64_t i = 0; i < kWidth; ++i)
        block[i] = r0 + i < rows ? _mm512_castps_si512(_mm512_maskz_loadu_ps(in_cols, x + (r0 + i) * ldx + c0))
                                 : _mm512_setzero_si512();
      transpose_16x16_epi32(block);
      for (int64_t i = 0; i < kWidth; ++i)
        split_store(_mm512_castsi512_ps(block[i]), hi + (c0 + i) * ld + r0, lo + (c0 + i) * ld + r0);
    }
}

// 2^x on the lanes of `keep` (0 elsewhere): exp2_poly's range reduction and polynomial with fused
// multiply-adds, and the 2^n by vscalefps. No clamp: the callers' x is at most a rounding error above 0 (the
// shift is the row's max or its log-sum-exp), and `keep` must exclude every lane below -125 (and NaN, -inf).
__attribute__((target("avx512f,fma"), always_inline)) inline __m512 exp2_lanes(__m512 x, __mmask16 keep) {
  using E = Exp2Poly;
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 poly = _mm512_set1_ps(E::kC6);
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(E::kC5));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(E::kC4));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(E::kC3));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(E::kC2));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(E::kC1));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(E::kC0));
  return _mm512_maskz_scalef_ps(keep, poly, n);
}

// The backward's row step, 16 columns at a time (the last chunk masked).
__attribute__((target("avx512f,fma"))) void exp2_ds_row_amx(float* s, float* ds, int64_t n, float scale, float shift,
                                                          float delta) {
  constexpr int64_t kWidth = 16;
  const __m512 vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift), vdelta = _mm512_set1_ps(delta);
  const __m512 min_exp = _mm512_set1_ps(Exp2Poly::kMinExp);
  for (int64_t c = 0; c < n; c += kWidth) {
    const __mmask16 lanes = first_lanes(n - c);
    const __m512 x = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(lanes, s + c), vscale, vshift);
    const __m512 p = exp2_lanes(x, _mm512_mask_cmp_ps_mask(lanes, x, min_exp, _CMP_GE_OQ));
    _mm512_mask_storeu_ps(s + c, lanes, p);
    const __m512 dp = _mm512_maskz_loadu_ps(lanes, ds + c);
    _mm512_mask_storeu_ps(ds + c, lanes, _mm512_mul_ps(p, _mm512_sub_ps(dp, vdelta)));
  }
}

// p = exp2_lanes of the 16 columns from c (x = s * scale - shift, the lanes outside [begin, end) and below
// -125 kept out); writes their hi and lo terms and returns p. kWholeRow: every column of the row is visible,
// no lane masks.
template <bool kWholeRow>
__attribute__((target("avx512f,avx512bw,avx512bf16,fma"), always_inline)) inline __m512 exp2_split_chunk(
    const float* s, int64_t c, int64_t begin, int64_t end, __m512 scale, __m512 shift, uint16_t* hi, uint16_t* lo) {
  using E = Exp2Poly;
  const __m512 min_exp = _mm512_set1_ps(E::kMinExp);
  __m512 x;
  __mmask16 keep;
  if (kWholeRow) {
    x = _mm512_fmsub_ps(_mm512_loadu_ps(s + c), scale, shift);
    keep = _mm512_cmp_ps_mask(x, min_exp, _CMP_GE_OQ);  // false for NaN, -inf
  } else {
    // Lanes of [begin, end) in this chunk; the others load as 0 and give p = 0.
    const __mmask16 visible = first_lanes(end - c) & ~first_lanes(begin - c);
    x = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(visible, s + c), scale, shift);
    keep = _mm512_mask_cmp_ps_mask(visible, x, min_exp, _CMP_GE_OQ);
  }
  const __m512 p = exp2_lanes(x, keep);
  split_store(p, hi + c, lo + c);
  return p;
}

// Two accumulators for the sum, one per half of each 32 columns.
template <bool kWholeRow>
__attribute__((target("avx512f,avx512bw,avx512bf16,fma"), always_inline)) inline float exp2_split_loop(
    const float* s, int64_t n_pad, int64_t begin, int64_t end, float scale, float shift, uint16_t* hi, uint16_t* lo) {
  constexpr int64_t kWidth = 16;
  const __m512 vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t c = 0; c < n_pad; c += 2 * kWidth) {
    acc0 = _mm512_add_ps(acc0, exp2_split_chunk<kWholeRow>(s, c, begin, end, vscale, vshift, hi, lo));
    acc1 = _mm512_add_ps(acc1, exp2_split_chunk<kWholeRow>(s, c + kWidth, begin, end, vscale, vshift, hi, lo));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

__attribute__((target("avx512f,avx512bw,avx512bf16,fma"))) float exp2_split_row_amx(
    const float* s, int64_t n_pad, int64_t begin, int64_t end, float scale, float shift, uint16_t* hi, uint16_t* lo) {
  if (begin == 0 && end == n_pad) return exp2_split_loop</*kWholeRow=*/true>(s, n_pad, begin, end, scale, shift, hi, lo);
  return exp2_split_loop</*kWholeRow=*/false>(s, n_pad, begin, end, scale, shift, hi, lo);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// C tiles 0-3 += A rows (tiles 4, 5 loaded from a0 and a1) times the B tiles 6 and 7. The tile numbers are
// immediates of the instructions, hence the literals.
__attribute__((target("amx-tile,amx-bf16"), always_inline)) inline void multiply_into_c(const uint16_t* a0,
                                                                                      const uint16_t* a1,
                                                                                      int64_t a_stride) {
  _tile_loadd(4, a0, a_stride);
  _tile_loadd(5, a1, a_stride);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

// 32 x 32 blocks of C in tiles 0-3, two A tiles (4, 5) and two B tiles (6, 7) per 32-deep step.
__attribute__((target("amx-tile,amx-bf16"))) void gemm_amx(int64_t m, int64_t n, int64_t k, const uint16_t* a,
                                                          const uint16_t* a_lo, int64_t lda, const uint16_t* b,
                                                          const uint16_t* b_lo, bool accumulate, float* c,
                                                          int64_t ldc) {
  // The tile load and store intrinsics are asm statements that declare no memory access: the barriers
  // keep the compiler from moving the operands' stores after them, or reads of C before them.
  __asm__ volatile("" ::: "memory");
  const int64_t kcs = k / kTileK;
  const int64_t a_stride = lda * int64_t(sizeof(uint16_t)), c_stride = ldc * int64_t(sizeof(float));
  const int64_t b_stride = kTileK * int64_t(sizeof(uint16_t));
  for (int64_t i = 0; i < m; i += 2 * kTileRows)
    for (int64_t j = 0; j < n; j += 2 * kTileCols) {
      float* c0 = c + i * ldc + j;
      float* c1 = c0 + kTileRows * ldc;
      if (accumulate) {
        _tile_loadd(0, c0, c_stride);
        _tile_loadd(1, c0 + kTileCols, c_stride);
        _tile_loadd(2, c1, c_stride);
        _tile_loadd(3, c1 + kTileCols, c_stride);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      const int64_t b_offset = (j / kTileCols) * kcs * kTileElems, b_next = kcs * kTileElems;
      for (int64_t kc = 0; kc < kcs; ++kc) {
        const int64_t at = i * lda + kc * kTileK, below = kTileRows * lda;
        for (const uint16_t* bv : {b, b_lo}) {
          if (bv == nullptr) continue;
          _tile_loadd(6, bv + b_offset + kc * kTileElems, b_stride);
          _tile_loadd(7, bv + b_offset + b_next + kc * kTileElems, b_stride);
          multiply_into_c(a + at, a + at + below, a_stride);
          if (a_lo != nullptr && bv == b) multiply_into_c(a_lo + at, a_lo + at + below, a_stride);
        }
      }
      _tile_stored(0, c0, c_stride);
      _tile_stored(1, c0 + kTileCols, c_stride);
      _tile_stored(2, c1, c_stride);
      _tile_stored(3, c1 + kTileCols, c_stride);
    }
  __asm__ volatile("" ::: "memory");
}

#endif  // FLASHATTN_CPU_AMX_BUILD

bool use_amx(Bf16Products products) {
#ifdef FLASHATTN_CPU_AMX_BUILD
  return products == Bf16Products::kAmx && amx_bf16_supported();
#else
  (void)products;
  return false;
#endif
}

// -1: no override; else the Bf16Products value.
std::atomic<int> g_override{-1};

}  // namespace

const char* bf16_products_name(Bf16Products products) {
  switch (products) {
    case Bf16Products::kAmx: return "amx";
    case Bf16Products::kEmulated: return "emulated";
    case Bf16Products::kFp32: break;
  }
  return "fp32";
}

bool amx_bf16_supported() {
#ifdef FLASHATTN_CPU_AMX_BUILD
  static const bool supported = detect_amx_bf16();
  return supported;
#else
  return false;
#endif
}

Bf16Products bf16_products() {
  const int forced = g_override.load(std::memory_order_relaxed);
  if (forced >= 0) {
    const Bf16Products p = Bf16Products(forced);
    return p == Bf16Products::kAmx && !amx_bf16_supported() ? Bf16Products::kFp32 : p;
  }
  static const bool switched_off = [] {
    const char* env = std::getenv("FLASHATTN_CPU_AMX");
    return env != nullptr && std::strcmp(env, "0") == 0;
  }();
  return !switched_off && amx_bf16_supported() ? Bf16Products::kAmx : Bf16Products::kFp32;
}

void override_bf16_products(Bf16Products products) { g_override.store(int(products), std::memory_order_relaxed); }
void clear_bf16_products_override() { g_override.store(-1, std::memory_order_relaxed); }

Bf16TileScope::Bf16TileScope(Bf16Products products) : amx_(use_amx(products)) {
#ifdef FLASHATTN_CPU_AMX_BUILD
  if (amx_) load_tile_config();
#endif
}

Bf16TileScope::~Bf16TileScope() {
#ifdef FLASHATTN_CPU_AMX_BUILD
  if (amx_) release_tiles();
#endif
}

// Each operation: its _amx form (AMX and AVX-512) when products is kAmx on a CPU that runs it, else its
// _portable form.
#ifdef FLASHATTN_CPU_AMX_BUILD
#define FLASHATTN_BF16_DISPATCH(products, op, ...) \
  (use_amx(products) ? op##_amx(__VA_ARGS__) : op##_portable(__VA_ARGS__))
#else
#define FLASHATTN_BF16_DISPATCH(products, op, ...) ((void)(products), op##_portable(__VA_ARGS__))
#endif

void pack_kt(Bf16Products products, const uint16_t* k, int64_t ldk, int64_t keys, int64_t keys_pad, int64_t d,
             uint16_t* dst) {
  FLASHATTN_BF16_DISPATCH(products, pack_kt, k, ldk, keys, keys_pad, d, dst);
}

void pack_v(Bf16Products products, const uint16_t* v, int64_t ldv, int64_t keys, int64_t keys_pad, int64_t d,
            uint16_t* dst) {
  FLASHATTN_BF16_DISPATCH(products, pack_v, v, ldv, keys, keys_pad, d, dst);
}

float exp2_split_row(Bf16Products products, const float* s, int64_t n_pad, int64_t begin, int64_t end, float scale,
                     float shift, uint16_t* hi, uint16_t* lo) {
  return FLASHATTN_BF16_DISPATCH(products, exp2_split_row, s, n_pad, begin, end, scale, shift, hi, lo);
}

void exp2_ds_row(Bf16Products products, float* s, float* ds, int64_t n, float scale, float shift, float delta) {
  FLASHATTN_BF16_DISPATCH(products, exp2_ds_row, s, ds, n, scale, shift, delta);
}

void split_rows(Bf16Products products, const float* x, int64_t ldx, int64_t rows, int64_t n, int64_t n_pad,
                uint16_t* hi, uint16_t* lo, int64_t ld) {
  FLASHATTN_BF16_DISPATCH(products, split_rows, x, ldx, rows, n, n_pad, hi, lo, ld);
}

void split_transposed(Bf16Products products, const float* x, int64_t ldx, int64_t rows, int64_t cols,
                      int64_t rows_pad, int64_t cols_pad, uint16_t* hi, uint16_t* lo, int64_t ld) {
  FLASHATTN_BF16_DISPATCH(products, split_transposed, x, ldx, rows, cols, rows_pad, cols_pad, hi, lo, ld);
}

void bf16_gemm(Bf16Products products, int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* a_lo,
               int64_t lda, const uint16_t* b_packed, const uint16_t* b_lo_packed, bool accumulate, float* c,
               int64_t ldc) {
  FLASHATTN_BF16_DISPATCH(products, gemm, m, n, k, a, a_lo, lda, b_packed, b_lo_packed, accumulate, c, ldc);
}

Bf16Terms bf16_terms(Bf16Products products, bool fp16, const uint16_t* rows, int64_t ld, int64_t count, int64_t d,
                     uint16_t* hi, uint16_t* lo) {
  if (!fp16) return {rows, nullptr, ld};
  FLASHATTN_BF16_DISPATCH(products, fp16_split_rows, rows, ld, count, d, hi, lo);
  return {hi, lo, d};
}

namespace {

using PackRows = void (*)(Bf16Products, const uint16_t*, int64_t, int64_t, int64_t, int64_t, uint16_t*);

// `pack` of each term of rows.
Bf16Terms pack_terms(PackRows pack, Bf16Products products, const Bf16Terms& rows, int64_t keys, int64_t keys_pad,
                     int64_t d, uint16_t* hi, uint16_t* lo) {
  pack(products, rows.hi, rows.ld, keys, keys_pad, d, hi);
  if (rows.lo == nullptr) return {hi, nullptr, 0};
  pack(products, rows.lo, rows.ld, keys, keys_pad, d, lo);
  return {hi, lo, 0};
}

}  // namespace

Bf16Terms pack_kt_terms(Bf16Products products, const Bf16Terms& rows, int64_t keys, int64_t keys_pad, int64_t d,
                        uint16_t* hi, uint16_t* lo) {
  return pack_terms(&pack_kt, products, rows, keys, keys_pad, d, hi, lo);
}

Bf16Terms pack_v_terms(Bf16Products products, const Bf16Terms& rows, int64_t keys, int64_t keys_pad, int64_t d,
                       uint16_t* hi, uint16_t* lo) {
  return pack_terms(&pack_v, products, rows, keys, keys_pad, d, hi, lo);
}

#undef FLASHATTN_BF16_DISPATCH

}  // namespace flashattn::detail::cpu
