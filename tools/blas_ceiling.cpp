// OpenBLAS sgemm rate on square products, timed with a steady clock after a warm-up.
#include "blas_ceiling.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#ifdef FLASHATTN_WITH_BLAS
#include <cblas.h>
#endif

namespace flashattn::cli {

#ifdef FLASHATTN_WITH_BLAS
namespace {
constexpr int kRepetitions = 5;
constexpr double kMinSecondsPerRepetition = 0.2;  // long enough to hide timer resolution and thread wake-up
}  // namespace

BlasRate measure_blas_sgemm(int n, int threads) {
  BlasRate r;
  r.available = true;
  r.library = openblas_get_config();
  openblas_set_num_threads(threads);
  r.threads = openblas_get_num_threads();
  const size_t elems = size_t(n) * size_t(n);
  std::vector<float> a(elems), b(elems), c(elems);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < elems; ++i) {
    a[i] = dist(rng);
    b[i] = dist(rng);
  }
  auto product = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  product();  // warm-up: thread start, page faults
  const double flops = 2.0 * double(n) * double(n) * double(n);
  std::vector<double> rates;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    int calls = 0;
    auto t0 = std::chrono::steady_clock::now();
    double seconds = 0;
    do {
      product();
      ++calls;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (seconds < kMinSecondsPerRepetition);
    rates.push_back(flops * calls / seconds * 1e-9);
  }
  std::sort(rates.begin(), rates.end());
  r.gflops = rates[rates.size() / 2];
  return r;
}
#else
BlasRate measure_blas_sgemm(int, int) { return BlasRate{}; }
#endif

}  // namespace flashattn::cli
