// Single-precision products of the small row-major tiles inside the CPU attention kernels.
//
// The kernels use our own packed GEMM (tile_gemm): a 6 x 16 AVX2/FMA micro-kernel picked at run time on
// x86-64 CPUs that have it, portable register-blocked loops everywhere else. Every worker thread runs its
// own products concurrently, which rules out a BLAS inside the tiles: Debian's serial OpenBLAS (0.3.21,
// built without USE_LOCKING) shares its packing buffers between callers, and two threads inside
// cblas_sgemm at once corrupted each other's results (about 1 in 500 products of 64 x 128 x 64 from three
// threads differed), while a threaded BLAS would fight our own thread pool. The library links no BLAS;
// the CLI's benchmark uses OpenBLAS only to measure the machine's GEMM ceiling.
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

// Which implementation tile_gemm uses on this machine: "avx2" or "portable".
const char* tile_gemm_impl();

// The implementations, for tests and benchmarks (same contract as tile_gemm):
// our packed GEMM with the best micro-kernel this CPU runs (AVX2/FMA or portable),
void tile_gemm_native(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
const char* tile_gemm_native_name();
// and the same with the portable micro-kernel forced.
void tile_gemm_portable(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                        int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace flashattn::detail::cpu
