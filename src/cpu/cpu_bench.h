// The CPU's single-precision GEMM rate: the ceiling that CPU attention throughput is reported against.
#pragma once

namespace flashattn::detail {

// Aggregate GFLOP/s of `threads` threads (<= 0: all hardware threads) each running independent
// n x n x n sgemms through the tile product the CPU kernels use (tile_gemm: the AVX2 micro-kernel where
// the CPU has it, else the portable loops). Median over several timed repetitions, after a warm-up.
// 0 for n <= 0.
double cpu_sgemm_gflops(int threads, int n);

// Which tile product cpu_sgemm_gflops measures: "avx2" or "portable".
const char* cpu_sgemm_impl();

}  // namespace flashattn::detail
