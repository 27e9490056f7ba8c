// Single-precision products of the small row-major tiles inside the CPU attention kernels.
//
// The kernels use our own packed GEMM (tile_gemm): an 8 x 32 AVX-512 or a 6 x 16 AVX2/FMA micro-kernel
// picked at run time on x86-64 CPUs that have them, portable register-blocked loops everywhere else. Every
// worker thread runs its own products concurrently, which rules out a BLAS inside the tiles: Debian's
// serial OpenBLAS (0.3.21, built without USE_LOCKING) shares its packing buffers between callers, and two
// threads inside cblas_sgemm at once corrupted each other's results (about 1 in 500 products of
// 64 x 128 x 64 from three threads differed), while a threaded BLAS would fight our own thread pool. The library links no BLAS;
// the CLI's benchmark uses OpenBLAS only to measure the machine's GEMM ceiling. (bf16 and fp16 inputs on a CPU with
// AMX take their products from bf16_tiles.h instead.)
#pragma once

#include <cstdint>

namespace flashattn::detail::cpu {

// How a tile operand is read: as stored, or transposed.
enum class Op { kNone, kTranspose };

// C[m x n] = alpha * op(A) * op(B) + beta * C. Row-major; lda/ldb/ldc are row strides in elements
// (op(A) is m x k, op(B) is k x n). beta == 0 overwrites C without reading it, so C may hold garbage.
// Empty products (m, n or k == 0) are allowed: with k == 0 the result is beta * C.
// Safe to call from any number of threads at once.
void tile_gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The micro-kernels, fastest first: 8 x 32 in zmm registers (AVX-512F), 6 x 16 in ymm (AVX2 + FMA), and
// portable 4 x 8 loops. The x86 ones are compiled by function attribute and picked at run time, and take
// a 4-row form for products of at most 4 rows.
enum class TileGemmImpl { kAvx512, kAvx2, kPortable };
const char* tile_gemm_impl_name(TileGemmImpl impl);  // "avx512", "avx2" or "portable"
// Whether this build and this CPU can run `impl` (portable: always).
bool tile_gemm_impl_available(TileGemmImpl impl);
// The one tile_gemm runs: the fastest available.
TileGemmImpl tile_gemm_best_impl();
// Its name.
const char* tile_gemm_impl();

// tile_gemm with a chosen micro-kernel (for tests and benchmarks); one this CPU cannot run falls back to
// the portable loops.
void tile_gemm_with(TileGemmImpl impl, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace flashattn::detail::cpu
