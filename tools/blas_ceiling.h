// The machine's single-precision GEMM rate through a threaded OpenBLAS: the ceiling that CPU attention
// throughput is reported against. Only the CLI links a BLAS; the library does not.
#pragma once

#include <string>

namespace flashattn::cli {

struct BlasRate {
  bool available = false;  // built with OpenBLAS
  double gflops = 0;       // median of several n x n x n sgemms, all `threads` working on each product
  int threads = 0;
  std::string library;  // OpenBLAS's own description of its build (core, threading)
};

BlasRate measure_blas_sgemm(int n, int threads);

}  // namespace flashattn::cli
