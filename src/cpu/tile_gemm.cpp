// Tile products: a blocked, register-tiled GEMM of our own (AVX-512 or AVX2/FMA micro-kernel chosen at run
// time on x86-64, portable loops elsewhere).
#include "cpu/tile_gemm.h"

#include <algorithm>
#include <vector>

// FLASHATTN_CPU_PORTABLE_ONLY builds only the portable code (to test it on a machine with AVX2).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FLASHATTN_CPU_PORTABLE_ONLY)
#define FLASHATTN_CPU_X86_DISPATCH 1
#include <immintrin.h>
#endif

namespace flashattn::detail::cpu {
namespace {

// Depth of one block: a packed B micro-panel (NR x kDepthBlock floats, 16 KiB for NR = 16) stays in L1.
constexpr int64_t kDepthBlock = 256;
// Rows of A packed at once (a multiple of every micro-kernel's row count), resident in L2 while the B
// micro-panels stream through L1. Measured on the development machine: 72 beats 24..288 at n >= 512.
constexpr int64_t kRowBlock = 72;
// An A operand up to this many floats (256 KiB: an attention tile in L2) is read in place by the x86
// micro-kernels instead of being packed: packing would only add a second copy to the cache footprint.
// (B is packed whenever several A panels read it: in place, its rows sit a power-of-two stride apart in
// typical tiles and fall into a handful of L1 sets.)
constexpr int64_t kDirectMaxFloats = 64 * 1024;

int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// Where a micro-kernel reads its operands. A(r, p) = a[r * row_stride + p * depth_stride] for r < MR;
// B(p, c) = b[p * depth_stride + c] for c < NR (columns always contiguous). Packed micro-panels are the
// special case A: (1, MR), B: NR.
struct PanelA {
  const float* a;
  int64_t row_stride;
  int64_t depth_stride;
};
struct PanelB {
  const float* b;
  int64_t depth_stride;
};

// Rows [0, rows) x depth [0, kc) of op(A) (already offset to the panel's first row and depth) into one
// packed micro-panel of MR rows; rows past `rows` are zero so the micro-kernel never branches.
template <int64_t MR>
void pack_a_panel(Op op, const float* a, int64_t lda, int64_t rows, int64_t kc, float* panel) {
  if (op == Op::kNone) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t p = 0; p < kc; ++p) panel[p * MR + r] = a[r * lda + p];
  } else {
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t r = 0; r < rows; ++r) panel[p * MR + r] = a[p * lda + r];
  }
  for (int64_t r = rows; r < MR; ++r)
    for (int64_t p = 0; p < kc; ++p) panel[p * MR + r] = 0.0f;
}

// Depth [0, kc) x columns [0, cols) of op(B) (already offset) into one packed micro-panel of NR columns,
// zero-padded past `cols`. Both loops read the source along its contiguous dimension.
template <int64_t NR>
void pack_b_panel(Op op, const float* b, int64_t ldb, int64_t cols, int64_t kc, float* panel) {
  if (op == Op::kNone) {
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t c = 0; c < cols; ++c) panel[p * NR + c] = b[p * ldb + c];
  } else {
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t p = 0; p < kc; ++p) panel[p * NR + c] = b[c * ldb + p];
  }
  for (int64_t c = cols; c < NR; ++c)
    for (int64_t p = 0; p < kc; ++p) panel[p * NR + c] = 0.0f;
}

// op(A)(row, depth) and op(B)(depth, col) addresses for an operand stored row-major with leading dim ld.
const float* a_at(Op op, const float* a, int64_t lda, int64_t row, int64_t depth) {
  return op == Op::kNone ? a + row * lda + depth : a + depth * lda + row;
}
const float* b_at(Op op, const float* b, int64_t ldb, int64_t depth, int64_t col) {
  return op == Op::kNone ? b + depth * ldb + col : b + col * ldb + depth;
}

// What a micro-kernel does with its MR x NR result `acc` at C: C = alpha acc when overwrite (C is not
// read: it may hold NaN or uninitialized scratch), else C = beta C + alpha acc.
struct WriteBack {
  float alpha = 1.0f;
  float beta = 0.0f;
  bool overwrite = true;
};

// Portable micro-kernel: 4 x 8 accumulators, which the baseline ISA (SSE2, NEON) keeps in 8 registers.
// It reads A from packed panels only: a run-time row stride keeps the compiler from vectorizing it.
struct PortableMicroKernel {
  static constexpr int64_t kRows = 4;
  static constexpr int64_t kCols = 8;
  static constexpr bool kReadsAInPlace = false;
  static void pack_b(Op op, const float* b, int64_t ldb, int64_t cols, int64_t kc, float* panel) {
    pack_b_panel<kCols>(op, b, ldb, cols, kc, panel);
  }
  static void run(int64_t kc, PanelA pa, PanelB pb, float* c, int64_t ldc, WriteBack wb) {
    float acc[kRows][kCols] = {};
    for (int64_t p = 0; p < kc; ++p) {
      const float* b = pb.b + p * pb.depth_stride;
      const float* a = pa.a + p * kRows;
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t j = 0; j < kCols; ++j) acc[r][j] += a[r] * b[j];
    }
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t j = 0; j < kCols; ++j)
        c[r * ldc + j] = wb.overwrite ? wb.alpha * acc[r][j] : wb.beta * c[r * ldc + j] + wb.alpha * acc[r][j];
  }
};

#ifdef FLASHATTN_CPU_X86_DISPATCH
// r[i][j] <- r[j][i].
__attribute__((target("avx2,fma"), always_inline)) inline void transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Packs a B micro-panel of NR columns for the x86 micro-kernels; B read transposed (the K tile of
// S = Q K^T) goes through 8 x 8 register transposes, which replace 64 scalar loads and strided stores by
// 8 vector loads and 8 vector stores. AVX2 only, so the AVX-512 kernel shares it.
template <int64_t NR>
__attribute__((target("avx2,fma"))) void pack_b_panel_x86(Op op, const float* b, int64_t ldb, int64_t cols,
                                                           int64_t kc, float* panel) {
  constexpr int64_t kBlock = 8;
  static_assert(NR % kBlock == 0, "the transposes fill whole groups of 8 columns");
  if (op == Op::kNone || cols < NR) {
    pack_b_panel<NR>(op, b, ldb, cols, kc, panel);
    return;
  }
  const int64_t kc_vec = kc / kBlock * kBlock;
  for (int64_t c0 = 0; c0 < NR; c0 += kBlock) {
    const float* src = b + c0 * ldb;
    for (int64_t p0 = 0; p0 < kc_vec; p0 += kBlock) {
      __m256 r[kBlock];
      for (int64_t i = 0; i < kBlock; ++i) r[i] = _mm256_loadu_ps(src + i * ldb + p0);
      transpose8(r);
      for (int64_t i = 0; i < kBlock; ++i) _mm256_storeu_ps(panel + (p0 + i) * NR + c0, r[i]);
    }
    for (int64_t p = kc_vec; p < kc; ++p)
      for (int64_t i = 0; i < kBlock; ++i) panel[p * NR + c0 + i] = src[i * ldb + p];
  }
}

// AVX2 + FMA micro-kernel: kRows x 16 accumulators (6 rows: 12 of the 16 ymm registers), two B vectors
// and one broadcast A value per depth step. Compiled for AVX2 by attribute only; called only when the CPU
// has it. The 4-row form serves products of at most 4 rows (decode's query rows), which the 6-row one would
// pad; both give the same bits.
template <int64_t Rows>
struct Avx2MicroKernel {
  static constexpr int64_t kRows = Rows;
  static constexpr int64_t kCols = 16;
  static constexpr bool kReadsAInPlace = true;
  __attribute__((target("avx2,fma"))) static void pack_b(Op op, const float* b, int64_t ldb, int64_t cols,
                                                          int64_t kc, float* panel) {
    pack_b_panel_x86<kCols>(op, b, ldb, cols, kc, panel);
  }
  __attribute__((target("avx2,fma"))) static void run(int64_t kc, PanelA pa, PanelB pb, float* c, int64_t ldc,
                                                       WriteBack wb) {
    constexpr int kVectors = kCols / 8;
    static_assert(kVectors == 2, "two accumulator vectors per row");
    __m256 acc[kRows][kVectors];
    const float* a[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      acc[r][0] = _mm256_setzero_ps();
      acc[r][1] = _mm256_setzero_ps();
      a[r] = pa.a + r * pa.row_stride;
      // Start fetching the C rows now: their strided lines would otherwise stall the write-back.
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + kCols - 1), _MM_HINT_T0);
    }
    const float* b = pb.b;
    for (int64_t p = 0, off = 0; p < kc; ++p, off += pa.depth_stride, b += pb.depth_stride) {
      const __m256 b0 = _mm256_loadu_ps(b);
      const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m256 x = _mm256_broadcast_ss(a[r] + off);
        acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
      }
    }
    const __m256 alpha = _mm256_set1_ps(wb.alpha);
    const __m256 beta = _mm256_set1_ps(wb.beta);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 2
      for (int v = 0; v < kVectors; ++v) {
        float* dst = c + r * ldc + 8 * v;
        __m256 x = _mm256_mul_ps(alpha, acc[r][v]);
        if (!wb.overwrite) x = _mm256_fmadd_ps(beta, _mm256_loadu_ps(dst), x);
        _mm256_storeu_ps(dst, x);
      }
    }
  }
};

// AVX-512 micro-kernel: kRows x 32 accumulators (8 rows: 16 of the 32 zmm registers), two B vectors and
// one broadcast A value per depth step. Every element is accumulated over the depth in the same order and
// written back with the same operations as in the AVX2 kernel, so the two give the same bits. The 4-row
// form serves products of at most 4 rows (decode's query rows), which the 8-row one would pad.
template <int64_t Rows>
struct Avx512MicroKernel {
  static constexpr int64_t kRows = Rows;
  static constexpr int64_t kCols = 32;
  static constexpr bool kReadsAInPlace = true;
  __attribute__((target("avx2,fma"))) static void pack_b(Op op, const float* b, int64_t ldb, int64_t cols,
                                                          int64_t kc, float* panel) {
    pack_b_panel_x86<kCols>(op, b, ldb, cols, kc, panel);
  }
  __attribute__((target("avx512f"))) static void run(int64_t kc, PanelA pa, PanelB pb, float* c, int64_t ldc,
                                                      WriteBack wb) {
    constexpr int kVectors = kCols / 16;
    static_assert(kVectors == 2, "two accumulator vectors per row");
    __m512 acc[kRows][kVectors];
    const float* a[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      acc[r][0] = _mm512_setzero_ps();
      acc[r][1] = _mm512_setzero_ps();
      a[r] = pa.a + r * pa.row_stride;
      // Start fetching the C rows now: their strided lines would otherwise stall the write-back.
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + kCols - 1), _MM_HINT_T0);
    }
    const float* b = pb.b;
    for (int64_t p = 0, off = 0; p < kc; ++p, off += pa.depth_stride, b += pb.depth_stride) {
      const __m512 b0 = _mm512_loadu_ps(b);
      const __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m512 x = _mm512_set1_ps(a[r][off]);
        acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
      }
    }
    const __m512 alpha = _mm512_set1_ps(wb.alpha);
    const __m512 beta = _mm512_set1_ps(wb.beta);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 2
      for (int v = 0; v < kVectors; ++v) {
        float* dst = c + r * ldc + 16 * v;
        __m512 x = _mm512_mul_ps(alpha, acc[r][v]);
        if (!wb.overwrite) x = _mm512_fmadd_ps(beta, _mm512_loadu_ps(dst), x);
        _mm512_storeu_ps(dst, x);
      }
    }
  }
};

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
bool cpu_has_avx512() {
  static const bool has = cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f");
  return has;
}
#endif

void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

// A float buffer per thread, aligned to a cache line and reused across calls (grows, never shrinks).
class PackBuffer {
 public:
  float* get(size_t floats) {
    if (floats > capacity_) {
      storage_.assign(floats + kAlignFloats, 0.0f);
      capacity_ = floats;
    }
    const uintptr_t address = reinterpret_cast<uintptr_t>(storage_.data());
    const uintptr_t aligned = (address + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
    return storage_.data() + (aligned - address) / sizeof(float);
  }

 private:
  static constexpr size_t kAlignBytes = 64;
  static constexpr size_t kAlignFloats = kAlignBytes / sizeof(float);
  std::vector<float> storage_;
  size_t capacity_ = 0;
};

// C = alpha op(A) op(B) + beta C in depth blocks of kDepthBlock and row blocks of kRowBlock, the
// micro-kernel running over (B micro-panel, A micro-panel) pairs. B is packed unless a single A panel
// reads it (decode's few query rows); a small A is read in place where the micro-kernel allows it. Only
// partial edge panels are then packed, zero-padded.
template <typename Micro>
void gemm_blocked(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  constexpr int64_t MR = Micro::kRows;
  constexpr int64_t NR = Micro::kCols;
  static_assert(kRowBlock % MR == 0, "the row block must hold whole micro-panels");
  const bool direct_a = Micro::kReadsAInPlace && m * k <= kDirectMaxFloats;
  const bool direct_b = op_b == Op::kNone && m <= MR;
  const int64_t kc_max = std::min(k, kDepthBlock);
  thread_local PackBuffer a_buffer, b_buffer;
  float* a_pack = a_buffer.get(size_t((direct_a ? MR : std::min(round_up(m, MR), kRowBlock)) * kc_max));
  float* b_pack = b_buffer.get(size_t(round_up(n, NR) * kc_max));
  float edge[MR * NR] = {};  // a micro-tile that overhangs C, copied in and out element by element
  const int64_t a_row_stride = op_a == Op::kNone ? lda : 1;
  const int64_t a_depth_stride = op_a == Op::kNone ? 1 : lda;

  for (int64_t p0 = 0; p0 < k; p0 += kDepthBlock) {
    const int64_t kc = std::min(kDepthBlock, k - p0);
    // beta applies once, on the first depth block; later blocks accumulate.
    WriteBack wb;
    wb.alpha = alpha;
    wb.beta = p0 == 0 ? beta : 1.0f;
    wb.overwrite = p0 == 0 && beta == 0.0f;
    // Whole B panels are read in place when B is not transposed and only one A panel passes over them
    // (each B element is then read once: a packed copy would cost more than it saves).
    const int64_t n_direct = direct_b ? n / NR * NR : 0;
    for (int64_t j0 = n_direct; j0 < n; j0 += NR)
      Micro::pack_b(op_b, b_at(op_b, b, ldb, p0, j0), ldb, std::min(NR, n - j0), kc, b_pack + j0 * kc);
    for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
      const int64_t mc = std::min(kRowBlock, m - i0);
      const int64_t mc_full = direct_a ? mc / MR * MR : 0;
      for (int64_t ib = mc_full; ib < mc; ib += MR)
        pack_a_panel<MR>(op_a, a_at(op_a, a, lda, i0 + ib, p0), lda, std::min(MR, mc - ib), kc,
                         a_pack + (ib - mc_full) * kc);
      for (int64_t j0 = 0; j0 < n; j0 += NR) {
        const int64_t nc = std::min(NR, n - j0);
        const PanelB pb = j0 < n_direct ? PanelB{b_at(op_b, b, ldb, p0, j0), ldb} : PanelB{b_pack + j0 * kc, NR};
        for (int64_t ib = 0; ib < mc; ib += MR) {
          const int64_t rows = std::min(MR, mc - ib);
          const PanelA pa = ib < mc_full ? PanelA{a_at(op_a, a, lda, i0 + ib, p0), a_row_stride, a_depth_stride}
                                         : PanelA{a_pack + (ib - mc_full) * kc, 1, MR};
          float* ctile = c + (i0 + ib) * ldc + j0;
          if (rows == MR && nc == NR) {
            Micro::run(kc, pa, pb, ctile, ldc, wb);
            continue;
          }
          // The overhanging tile goes through the micro-kernel's own write-back on a copy, so an element
          // rounds the same whether it falls in a full tile or an edge one.
          if (!wb.overwrite)
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t j = 0; j < nc; ++j) edge[r * NR + j] = ctile[r * ldc + j];
          Micro::run(kc, pa, pb, edge, NR, wb);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < nc; ++j) ctile[r * ldc + j] = edge[r * NR + j];
        }
      }
    }
  }
}

}  // namespace

const char* tile_gemm_impl_name(TileGemmImpl impl) {
  switch (impl) {
    case TileGemmImpl::kAvx512:
      return "avx512";
    case TileGemmImpl::kAvx2:
      return "avx2";
    case TileGemmImpl::kPortable:
      break;
  }
  return "portable";
}

bool tile_gemm_impl_available(TileGemmImpl impl) {
  switch (impl) {
#ifdef FLASHATTN_CPU_X86_DISPATCH
    case TileGemmImpl::kAvx512:
      return cpu_has_avx512();
    case TileGemmImpl::kAvx2:
      return cpu_has_avx2_fma();
#else
    case TileGemmImpl::kAvx512:
    case TileGemmImpl::kAvx2:
      return false;
#endif
    case TileGemmImpl::kPortable:
      break;
  }
  return true;
}

TileGemmImpl tile_gemm_best_impl() {
  for (TileGemmImpl impl : {TileGemmImpl::kAvx512, TileGemmImpl::kAvx2})
    if (tile_gemm_impl_available(impl)) return impl;
  return TileGemmImpl::kPortable;
}

namespace {

// The product on `impl`, which this CPU is known to run.
void run_impl(TileGemmImpl impl, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  switch (impl) {
#ifdef FLASHATTN_CPU_X86_DISPATCH
    case TileGemmImpl::kAvx512:
      if (m <= 4)
        gemm_blocked<Avx512MicroKernel<4>>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      else
        gemm_blocked<Avx512MicroKernel<8>>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    case TileGemmImpl::kAvx2:
      if (m <= 4)
        gemm_blocked<Avx2MicroKernel<4>>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      else
        gemm_blocked<Avx2MicroKernel<6>>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
#endif
    default:
      gemm_blocked<PortableMicroKernel>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace

void tile_gemm_with(TileGemmImpl impl, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // An implementation this CPU lacks falls back to the portable one rather than fault.
  if (!tile_gemm_impl_available(impl)) impl = TileGemmImpl::kPortable;
  run_impl(impl, op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tile_gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // Chosen once: the best implementation is available by construction.
  static const TileGemmImpl best = tile_gemm_best_impl();
  run_impl(best, op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char* tile_gemm_impl() { return tile_gemm_impl_name(tile_gemm_best_impl()); }

}  // namespace flashattn::detail::cpu
