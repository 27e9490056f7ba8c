// Measures the sgemm ceiling of this machine with the CPU backend's own tile product.
#include "cpu/cpu_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "cpu/tile_gemm.h"

namespace flashattn::detail {
namespace {

constexpr int kRepetitions = 5;
constexpr double kTargetRepSeconds = 0.2;  // long enough to hide thread start-up and timer resolution

using Clock = std::chrono::steady_clock;
using GemmFn = void (*)(cpu::Op, cpu::Op, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                        int64_t, float, float*, int64_t);

struct GemmOperands {
  std::vector<float> a, b, c;
  GemmOperands(int64_t n, uint64_t seed) : a(size_t(n * n)), b(size_t(n * n)), c(size_t(n * n)) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
  }
  void multiply(GemmFn gemm, int64_t n) {
    gemm(cpu::Op::kNone, cpu::Op::kNone, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  }
};

// Seconds for every thread to finish `iters` products on its own operands.
double timed_round(GemmFn gemm, std::vector<GemmOperands>& ops, int64_t n, int64_t iters) {
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (size_t t = 1; t < ops.size(); ++t)
    threads.emplace_back([&, t] {
      for (int64_t i = 0; i < iters; ++i) ops[t].multiply(gemm, n);
    });
  for (int64_t i = 0; i < iters; ++i) ops[0].multiply(gemm, n);
  for (std::thread& th : threads) th.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double measure(GemmFn gemm, int threads, int n) {
  std::vector<GemmOperands> ops;
  for (int t = 0; t < threads; ++t) ops.emplace_back(n, uint64_t(t) + 1);
  const double warm = std::max(1e-6, timed_round(gemm, ops, n, 1));
  const int64_t iters = std::max<int64_t>(1, int64_t(kTargetRepSeconds / warm));
  std::vector<double> rates;
  const double flops = 2.0 * double(n) * double(n) * double(n) * double(iters) * double(threads);
  for (int r = 0; r < kRepetitions; ++r) rates.push_back(flops / timed_round(gemm, ops, n, iters) * 1e-9);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

double cpu_sgemm_gflops(int threads, int n) {
  if (n <= 0) return 0.0;
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  return measure(&cpu::tile_gemm, threads, n);
}

const char* cpu_sgemm_impl() { return cpu::tile_gemm_impl(); }

}  // namespace flashattn::detail
