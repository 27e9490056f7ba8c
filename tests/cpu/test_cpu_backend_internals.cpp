// Internals of the CPU backend: tile products, the exp2 polynomial and row loops, the worker pool, and
// the backend's own rules. The attention results themselves are checked in test_cpu_attention.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "api/backend.h"
#include "api/problem.h"
#include "common/bf16_products.h"
#include "core/numeric.h"
#include "cpu/cache_rows.h"
#include "cpu/convert.h"
#include "cpu/row_ops.h"
#include "cpu/thread_pool.h"
#include "cpu/tile_gemm.h"
#include "reference/harness.h"

namespace fa = flashattn;
namespace cpu = flashattn::detail::cpu;
using cpu::Op;
using fa::DType;

namespace {

struct GemmCase {
  Op op_a, op_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // extra elements per row of every operand: leading dims larger than the rows
};

// op(X)(i, j) of a row-major operand with leading dimension ld.
float at(Op op, const std::vector<float>& x, int64_t ld, int64_t i, int64_t j) {
  return op == Op::kNone ? x[size_t(i * ld + j)] : x[size_t(j * ld + i)];
}

using GemmFn = std::function<void(Op, Op, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                                  int64_t, float, float*, int64_t)>;

// Runs one product against a float64 loop; C starts as NaN when beta == 0 (it must not be read).
void check_gemm(const GemmFn& gemm, const GemmCase& g, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << "m " << g.m << " n " << g.n << " k " << g.k << " op_a " << int(g.op_a)
                                    << " op_b " << int(g.op_b) << " alpha " << g.alpha << " beta " << g.beta
                                    << " pad " << g.pad);
  const int64_t a_rows = g.op_a == Op::kNone ? g.m : g.k, a_cols = g.op_a == Op::kNone ? g.k : g.m;
  const int64_t b_rows = g.op_b == Op::kNone ? g.k : g.n, b_cols = g.op_b == Op::kNone ? g.n : g.k;
  const int64_t lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(size_t(std::max<int64_t>(1, a_rows * lda))), b(size_t(std::max<int64_t>(1, b_rows * ldb)));
  std::vector<float> c(size_t(std::max<int64_t>(1, g.m * ldc)));
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  for (float& x : c) x = g.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : dist(rng);
  const std::vector<float> c0 = c;
  gemm(g.op_a, g.op_b, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta, c.data(), ldc);
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double want = 0, magnitude = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double term = double(at(g.op_a, a, lda, i, p)) * double(at(g.op_b, b, ldb, p, j));
        want += term;
        magnitude += std::fabs(term);
      }
      want *= g.alpha;
      if (g.beta != 0.0f) want += double(g.beta) * c0[size_t(i * ldc + j)];
      const double tol = 4e-7 * (std::fabs(g.alpha) * magnitude + std::fabs(g.beta) + 1.0) * std::sqrt(double(g.k) + 1);
      ASSERT_NEAR(c[size_t(i * ldc + j)], want, tol) << "at (" << i << ", " << j << ")";
    }
    // The padding between rows of C is not part of C and must be untouched.
    for (int64_t j = g.n; j < ldc && i * ldc + j < int64_t(c.size()); ++j) {
      const float before = c0[size_t(i * ldc + j)], after = c[size_t(i * ldc + j)];
      ASSERT_TRUE(std::memcmp(&before, &after, sizeof before) == 0) << "padding written at (" << i << ", " << j << ")";
    }
  }
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> v;
  const int64_t sizes[][3] = {{1, 1, 1}, {5, 7, 3}, {6, 16, 1}, {13, 17, 19}, {64, 64, 64}, {71, 33, 257},
                              {128, 256, 64}, {130, 70, 300}, {200, 48, 129}, {3, 300, 513}, {4, 96, 128}};
  for (const auto& s : sizes)
    for (Op oa : {Op::kNone, Op::kTranspose})
      for (Op ob : {Op::kNone, Op::kTranspose}) {
        v.push_back({oa, ob, s[0], s[1], s[2], 1.0f, 0.0f, 0});
        v.push_back({oa, ob, s[0], s[1], s[2], 0.5f, 1.0f, 3});
        v.push_back({oa, ob, s[0], s[1], s[2], -1.25f, 0.75f, 16});
      }
  return v;
}

// Every micro-kernel this CPU runs, against the float64 loops (one this CPU lacks is skipped, by name).
class CpuTileGemmImpl : public ::testing::TestWithParam<cpu::TileGemmImpl> {};

TEST_P(CpuTileGemmImpl, MatchesFloat64Loops) {
  const cpu::TileGemmImpl impl = GetParam();
  if (!cpu::tile_gemm_impl_available(impl))
    GTEST_SKIP() << "this CPU (or this build) has no " << cpu::tile_gemm_impl_name(impl) << " micro-kernel";
  std::mt19937_64 rng(1 + uint64_t(impl));
  const GemmFn gemm = [impl](Op oa, Op ob, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                             int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    cpu::tile_gemm_with(impl, oa, ob, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  };
  for (const GemmCase& g : gemm_cases()) check_gemm(gemm, g, rng);
}

INSTANTIATE_TEST_SUITE_P(AllMicroKernels, CpuTileGemmImpl,
                         ::testing::Values(cpu::TileGemmImpl::kAvx512, cpu::TileGemmImpl::kAvx2,
                                           cpu::TileGemmImpl::kPortable),
                         [](const ::testing::TestParamInfo<cpu::TileGemmImpl>& info) {
                           return std::string(cpu::tile_gemm_impl_name(info.param));
                         });

// The two x86 kernels accumulate every element in the same order with fused multiply-adds and write back
// the same way: the choice between them must not change a bit of any result.
TEST(CpuTileGemm, Avx512AndAvx2GiveTheSameBits) {
  if (!cpu::tile_gemm_impl_available(cpu::TileGemmImpl::kAvx512))
    GTEST_SKIP() << "this CPU (or this build) has no avx512 micro-kernel";
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const GemmCase& g : gemm_cases()) {
    SCOPED_TRACE(::testing::Message() << "m " << g.m << " n " << g.n << " k " << g.k << " op_a " << int(g.op_a)
                                      << " op_b " << int(g.op_b) << " beta " << g.beta);
    const int64_t lda = (g.op_a == Op::kNone ? g.k : g.m) + g.pad, ldb = (g.op_b == Op::kNone ? g.n : g.k) + g.pad;
    const int64_t ldc = g.n + g.pad;
    std::vector<float> a(size_t((g.op_a == Op::kNone ? g.m : g.k) * lda));
    std::vector<float> b(size_t((g.op_b == Op::kNone ? g.k : g.n) * ldb)), c(size_t(g.m * ldc));
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    for (float& x : c) x = dist(rng);
    std::vector<float> c512 = c, c256 = c;
    cpu::tile_gemm_with(cpu::TileGemmImpl::kAvx512, g.op_a, g.op_b, g.m, g.n, g.k, g.alpha, a.data(), lda,
                        b.data(), ldb, g.beta, c512.data(), ldc);
    cpu::tile_gemm_with(cpu::TileGemmImpl::kAvx2, g.op_a, g.op_b, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(),
                        ldb, g.beta, c256.data(), ldc);
    ASSERT_EQ(std::memcmp(c512.data(), c256.data(), c.size() * sizeof(float)), 0);
  }
}

// The in-place cache products of every implementation against float64 loops: keys scattered through a
// buffer in a shuffled order (as paged caches hand them out), heads a padded stride apart, head dims that
// fill whole vectors and ones that end in a partial one, query row counts around the 4-row blocks.
struct CacheRowsCase {
  DType dtype;
  int64_t d, m, keys, heads;
};

void check_cache_rows(cpu::CacheRowsImpl impl, const CacheRowsCase& t, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << fa::to_string(t.dtype) << " d " << t.d << " m " << t.m << " keys " << t.keys
                                    << " heads " << t.heads);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t elem = t.dtype == DType::kFloat32 ? 4 : 2;
  const int64_t head_elems = t.d + 8;  // heads of a key 8 elements apart beyond d
  const int64_t slot_elems = t.heads * head_elems + 16;
  const int64_t slots = t.keys + 3;
  // The cache's values, of the dtype; the keys take the slots in a shuffled order.
  fa::harness::HostTensor cache = fa::harness::HostTensor::make(t.dtype, {slots * slot_elems});
  fa::harness::fill_uniform(&cache, rng);
  const char* cache_bytes = reinterpret_cast<const char*>(cache.storage.data());
  std::vector<int64_t> slot(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) slot[size_t(i)] = i;
  std::shuffle(slot.begin(), slot.end(), rng);
  std::vector<const char*> rows(size_t(t.keys));
  for (int64_t i = 0; i < t.keys; ++i) rows[size_t(i)] = cache_bytes + slot[size_t(i)] * slot_elems * elem;
  const cpu::CacheBlock block{t.dtype, rows.data(), head_elems * elem, t.heads, t.keys, t.d};
  auto cache_value = [&](int64_t h, int64_t i, int64_t x) {
    return cache.get(slot[size_t(i)] * slot_elems + h * head_elems + x);
  };

  // Scores: query rows of values of the dtype (decode's query has the cache's dtype).
  fa::harness::HostTensor q_values = fa::harness::HostTensor::make(t.dtype, {t.heads * t.m * t.d});
  fa::harness::fill_uniform(&q_values, rng);
  std::vector<float> q(size_t(q_values.numel()));
  for (size_t e = 0; e < q.size(); ++e) q[e] = float(q_values.get(int64_t(e)));
  const int64_t stride = cpu::cache_query_stride(impl, t.dtype, t.d);
  std::vector<char> packed(size_t(t.heads * t.m * stride * cpu::cache_query_elem_bytes(impl, t.dtype)));
  cpu::cache_query_pack(impl, t.dtype, q.data(), t.m * t.d, t.heads, t.m, t.d, packed.data());
  const int64_t lds = t.keys + 5, s_head = t.m * lds + 3;
  std::vector<float> s(size_t(t.heads * s_head), std::numeric_limits<float>::quiet_NaN());
  const float alpha = 0.37f;
  cpu::cache_scores(impl, block, packed.data(), t.m, alpha, s.data(), s_head, lds);
  for (int64_t h = 0; h < t.heads; ++h)
    for (int64_t r = 0; r < t.m; ++r) {
      for (int64_t i = 0; i < t.keys; ++i) {
        double want = 0, magnitude = 0;
        for (int64_t x = 0; x < t.d; ++x) {
          const double term = double(q[size_t((h * t.m + r) * t.d + x)]) * cache_value(h, i, x);
          want += term;
          magnitude += std::fabs(term);
        }
        ASSERT_NEAR(s[size_t(h * s_head + r * lds + i)], alpha * want, 1e-6 * alpha * magnitude * std::sqrt(double(t.d)))
            << "score of head " << h << " row " << r << " key " << i;
      }
      for (int64_t i = t.keys; i < lds && r * lds + i < s_head; ++i)
        ASSERT_TRUE(std::isnan(s[size_t(h * s_head + r * lds + i)])) << "padding written at key " << i;
    }

  // P V into accumulators that already hold values (in the layout the implementation keeps).
  const int64_t ldp = t.keys + 2, p_head = t.m * ldp + 1, o_head = t.m * t.d + 7;
  std::vector<float> p(size_t(t.heads * p_head));
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (float& x : p) x = unit(rng);
  std::vector<float> o0(size_t(t.heads * o_head));
  for (float& x : o0) x = dist(rng);
  const bool interleaved = cpu::cache_output_interleaved(impl, t.dtype, t.d);
  std::vector<float> o = o0;
  if (interleaved)  // the inverse of cache_output_deinterleave on every accumulator row
    for (int64_t h = 0; h < t.heads; ++h)
      for (int64_t r = 0; r < t.m; ++r)
        for (int64_t g = 0; g < t.d; g += 32)
          for (int64_t j = 0; j < 16; ++j) {
            const int64_t at = h * o_head + r * t.d + g;
            o[size_t(at + j)] = o0[size_t(at + 2 * j)];
            o[size_t(at + 16 + j)] = o0[size_t(at + 2 * j + 1)];
          }
  cpu::cache_accumulate(impl, block, p.data(), p_head, ldp, t.m, o.data(), o_head);
  std::vector<float> row(size_t(t.d));
  for (int64_t h = 0; h < t.heads; ++h) {
    for (int64_t r = 0; r < t.m; ++r) {
      const float* got = o.data() + h * o_head + r * t.d;
      if (interleaved) {
        cpu::cache_output_deinterleave(got, t.d, row.data());
        got = row.data();
      }
      for (int64_t x = 0; x < t.d; ++x) {
        double want = o0[size_t(h * o_head + r * t.d + x)], magnitude = std::fabs(want);
        for (int64_t i = 0; i < t.keys; ++i) {
          const double term = double(p[size_t(h * p_head + r * ldp + i)]) * cache_value(h, i, x);
          want += term;
          magnitude += std::fabs(term);
        }
        ASSERT_NEAR(got[x], want, 1e-6 * magnitude * std::sqrt(double(t.keys) + 1))
            << "output of head " << h << " row " << r << " column " << x;
      }
    }
    // The padding between heads' accumulators is not part of them.
    for (int64_t x = t.m * t.d; x < o_head; ++x)
      ASSERT_EQ(o[size_t(h * o_head + x)], o0[size_t(h * o_head + x)]) << "padding written, head " << h;
  }
}

class CpuCacheRowsImpl : public ::testing::TestWithParam<cpu::CacheRowsImpl> {};

TEST_P(CpuCacheRowsImpl, MatchesFloat64Loops) {
  const cpu::CacheRowsImpl impl = GetParam();
  if (!cpu::cache_rows_impl_available(impl))
    GTEST_SKIP() << "this CPU (or this build) has no " << cpu::cache_rows_impl_name(impl) << " form";
  std::mt19937_64 rng(11 + uint64_t(impl));
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat32})
    for (int64_t d : {128, 64, 256, 40, 72, 8})
      for (const auto& mk : {std::pair<int64_t, int64_t>{4, 13}, {1, 4}, {3, 7}, {5, 1}, {9, 17}, {16, 9}})
        check_cache_rows(impl, CacheRowsCase{dtype, d, mk.first, mk.second, d == 256 ? 2 : 3}, rng);
}

INSTANTIATE_TEST_SUITE_P(AllForms, CpuCacheRowsImpl,
                         ::testing::Values(cpu::CacheRowsImpl::kAvx512Bf16, cpu::CacheRowsImpl::kAvx512,
                                           cpu::CacheRowsImpl::kPortable),
                         [](const ::testing::TestParamInfo<cpu::CacheRowsImpl>& info) {
                           return std::string(cpu::cache_rows_impl_name(info.param));
                         });

TEST(CpuTileGemm, EmptyDepthScalesC) {
  std::vector<float> c = {1.0f, 2.0f, 3.0f, 4.0f};
  cpu::tile_gemm(Op::kNone, Op::kNone, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 1, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
  cpu::tile_gemm(Op::kNone, Op::kNone, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 1, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
}

// The attention kernels call tile_gemm from every worker at once: results must be those of a lone call.
TEST(CpuTileGemm, ConcurrentCallsGiveTheSingleThreadedBits) {
  constexpr int64_t kM = 128, kN = 128, kK = 64;
  constexpr int kThreads = 4, kCalls = 200;
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(kM * kK), b(kN * kK), want(kM * kN);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  cpu::tile_gemm(Op::kNone, Op::kTranspose, kM, kN, kK, 1.0f, a.data(), kK, b.data(), kK, 0.0f, want.data(), kN);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      std::vector<float> c(kM * kN);
      for (int i = 0; i < kCalls; ++i) {
        cpu::tile_gemm(Op::kNone, Op::kTranspose, kM, kN, kK, 1.0f, a.data(), kK, b.data(), kK, 0.0f, c.data(), kN);
        if (std::memcmp(c.data(), want.data(), c.size() * sizeof(float)) != 0) ++mismatches;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(CpuRowOps, Exp2PolyIsAccurateAndHandlesTheEdges) {
  double worst_ulps = 0;
  for (int i = -130000; i <= 20000; ++i) {
    const float x = float(i) * 1e-3f;
    const double want = std::exp2(double(x));
    const float got = cpu::exp2_poly(x);
    if (want < std::ldexp(1.0, -125)) {
      EXPECT_TRUE(got == 0.0f || std::fabs(got - want) <= 1e-37) << "x " << x;
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    worst_ulps = std::max(worst_ulps, std::fabs(double(got) - want) / ulp);
  }
  EXPECT_LT(worst_ulps, 2.0);
  EXPECT_EQ(cpu::exp2_poly(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp2_poly(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::exp2_poly(-1000.0f), 0.0f);
  EXPECT_EQ(cpu::exp2_poly(std::numeric_limits<float>::quiet_NaN()), 0.0f);
  EXPECT_TRUE(std::isfinite(cpu::exp2_poly(1000.0f)));
}

// The vector loops must give exactly the scalar polynomial's bits, tails included, whichever variant runs.
// Whether two float vectors hold the same bits (empty ones do; memcmp may not be given their null data).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(CpuRowOps, VectorLoopsMatchTheScalarPolynomialBitwise) {
  SCOPED_TRACE(std::string("row loops variant ") + cpu::row_ops_variant());
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> dist(-40.0f, 4.0f);
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 40, 63, 64, 100, 129, 256}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    if (n > 3) x[2] = -std::numeric_limits<float>::infinity();
    const float shift = 1.5f;
    std::vector<float> scalar(x), summed(x), plain(x);
    float scalar_max = -std::numeric_limits<float>::infinity();
    for (float v : x) scalar_max = std::max(scalar_max, v);
    EXPECT_EQ(cpu::row_max(x.data(), n), scalar_max) << "n " << n;
    double sum = 0;
    for (float& v : scalar) {
      v = cpu::exp2_poly(v - shift);
      sum += v;
    }
    // The documented order: 8 lanes, lane l adding elements l, l + 8, ... of the whole groups of 8; then
    // the lanes in order; then the tail.
    constexpr int64_t kLanes = 8;
    float lane[kLanes] = {}, tail = 0.0f;
    const int64_t whole = n / kLanes * kLanes;
    for (int64_t i = 0; i < whole; ++i) lane[i % kLanes] += scalar[size_t(i)];
    for (int64_t i = whole; i < n; ++i) tail += scalar[size_t(i)];
    float ordered_sum = 0.0f;
    for (float l : lane) ordered_sum += l;
    ordered_sum += tail;
    const float got_sum = cpu::exp2_shift_sum(summed.data(), n, shift);
    EXPECT_EQ(std::memcmp(&got_sum, &ordered_sum, sizeof got_sum), 0) << "n " << n;
    cpu::exp2_shift(plain.data(), n, shift);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&summed[size_t(i)], &scalar[size_t(i)], sizeof(float)), 0) << "n " << n << " i " << i;
      ASSERT_EQ(std::memcmp(&plain[size_t(i)], &scalar[size_t(i)], sizeof(float)), 0) << "n " << n << " i " << i;
    }
    EXPECT_NEAR(got_sum, sum, 1e-6 * (sum + 1)) << "n " << n;

    // The scaled form: the bits of a separate scaling pass, then exp2_shift_sum.
    const float scale = 0.1803369f;
    std::vector<float> prescaled(x), fused(x);
    for (float& v : prescaled) v *= scale;
    const float prescaled_sum = cpu::exp2_shift_sum(prescaled.data(), n, shift);
    const float fused_sum = cpu::exp2_scale_shift_sum(fused.data(), n, scale, shift);
    EXPECT_EQ(std::memcmp(&fused_sum, &prescaled_sum, sizeof fused_sum), 0) << "n " << n;
    EXPECT_TRUE(same_bits(fused, prescaled)) << "n " << n;
    std::vector<float> prescaled_plain(x), fused_plain(x);
    for (float& v : prescaled_plain) v *= scale;
    cpu::exp2_shift(prescaled_plain.data(), n, shift);
    cpu::exp2_scale_shift(fused_plain.data(), n, scale, shift);
    EXPECT_TRUE(same_bits(fused_plain, prescaled_plain)) << "n " << n;
  }
}

TEST(CpuConvert, Fp16RowsMatchTheScalarConversionForEveryBitPattern) {
  constexpr int64_t kPatterns = 1 << 16;
  std::vector<uint16_t> src(kPatterns + 3);  // + 3: a tail that the 8- and 16-wide loops leave to scalar code
  for (int64_t i = 0; i < int64_t(src.size()); ++i) src[size_t(i)] = uint16_t(i % kPatterns);
  std::vector<float> got(src.size());
  cpu::fp16_to_float_row(src.data(), int64_t(src.size()), got.data());
  for (size_t i = 0; i < src.size(); ++i) {
    const float want = fa::core::fp16_bits_to_float(src[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got[i])) << "pattern " << src[i];
      continue;
    }
    ASSERT_EQ(std::memcmp(&got[i], &want, sizeof want), 0) << "pattern " << src[i];
  }
}

TEST(CpuConvert, Bf16RowsMatchTheScalarConversionForEveryBitPattern) {
  constexpr int64_t kPatterns = 1 << 16;
  std::vector<uint16_t> src(kPatterns + 3);  // + 3: a tail that the 8- and 16-wide loops leave to scalar code
  for (int64_t i = 0; i < int64_t(src.size()); ++i) src[size_t(i)] = uint16_t((i * 40503) % kPatterns);
  std::vector<float> got(src.size());
  cpu::bf16_to_float_row(src.data(), int64_t(src.size()), got.data());
  for (size_t i = 0; i < src.size(); ++i) {
    const float want = fa::core::bf16_bits_to_float(src[i]);  // exact, NaN payloads included
    ASSERT_EQ(std::memcmp(&got[i], &want, sizeof want), 0) << "pattern " << src[i];
  }
}

TEST(CpuWorkerPool, RunsEveryTaskExactlyOnceForAnyWorkerCount) {
  for (int workers : {1, 2, 3, 8}) {
    constexpr int64_t kTasks = 1000;
    std::vector<std::atomic<int>> runs(kTasks);
    fa::Status s = cpu::run_workers(workers, kTasks, [&](cpu::TaskQueue& queue) {
      int64_t t = 0;
      while (queue.pop(&t)) ++runs[size_t(t)];
      return fa::Status::Ok();
    });
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (int64_t t = 0; t < kTasks; ++t) ASSERT_EQ(runs[size_t(t)].load(), 1) << "task " << t << " workers " << workers;
  }
}

TEST(CpuWorkerPool, ErrorsAndExceptionsBecomeAStatus) {
  fa::Status s = cpu::run_workers(3, 100, [](cpu::TaskQueue& queue) {
    int64_t t = 0;
    while (queue.pop(&t))
      if (t == 17) return fa::Status::Runtime("task 17 failed");
    return fa::Status::Ok();
  });
  EXPECT_EQ(s.code(), fa::StatusCode::kRuntimeError);
  EXPECT_NE(s.message().find("task 17"), std::string::npos);

  s = cpu::run_workers(2, 10, [](cpu::TaskQueue&) -> fa::Status { throw std::bad_alloc(); });
  EXPECT_EQ(s.code(), fa::StatusCode::kOutOfMemory);
  s = cpu::run_workers(2, 10, [](cpu::TaskQueue&) -> fa::Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(s.code(), fa::StatusCode::kRuntimeError);
  EXPECT_NE(s.message().find("boom"), std::string::npos);
}

TEST(CpuWorkerPool, WorkerCountFollowsTheRequestAndTheTasks) {
  EXPECT_EQ(cpu::resolve_worker_count(3, 100), 3);
  EXPECT_EQ(cpu::resolve_worker_count(8, 2), 2);
  EXPECT_EQ(cpu::resolve_worker_count(4, 0), 1);
  EXPECT_GE(cpu::resolve_worker_count(0, 100), 1);
}

// A valid problem on host tensors, for the backend's own checks.
struct SmallProblem {
  fa::harness::HostTensor q, k, v, out;
  fa::AttentionArgs args;
  SmallProblem(fa::DType dtype, int64_t head_dim) {
    q = fa::harness::HostTensor::make(dtype, {1, 4, 2, head_dim});
    k = fa::harness::HostTensor::make(dtype, {1, 4, 2, head_dim});
    v = fa::harness::HostTensor::make(dtype, {1, 4, 2, head_dim});
    out = fa::harness::HostTensor::make(dtype, {1, 4, 2, head_dim});
    args.q = q.view;
    args.k = k.view;
    args.v = v.view;
    args.out = out.view;
  }
  fa::Status check(fa::RunInfo* info = nullptr) {
    fa::detail::Problem p;
    fa::Status s = fa::detail::make_problem(args, &p);
    if (!s.ok()) return s;
    return fa::detail::cpu_check(p, info);
  }
};

TEST(CpuBackendCheck, NamesTheArgumentAndTheRule) {
  SmallProblem wide(fa::DType::kFloat32, 300);
  fa::Status s = wide.check();
  EXPECT_EQ(s.code(), fa::StatusCode::kNotSupported);
  EXPECT_EQ(s.message(), "q: head_dim 300 > 256 is not supported by backend cpu");

  SmallProblem fp8(fa::DType::kFloat8E4M3, 64);
  s = fp8.check();
  EXPECT_EQ(s.code(), fa::StatusCode::kNotSupported);
  EXPECT_EQ(s.message(), "dtype fp8_e4m3 is not supported by backend cpu");

  SmallProblem fa3(fa::DType::kFloat32, 64);
  fa3.args.algorithm = fa::Algorithm::kFA3;
  s = fa3.check();
  EXPECT_EQ(s.code(), fa::StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("algorithm fa3"), std::string::npos) << s.message();
}

TEST(CpuBackendCheck, FillsRunInfoForEachDirection) {
  SmallProblem ok(fa::DType::kBFloat16, 256);
  ok.args.algorithm = fa::Algorithm::kFA2;
  fa::RunInfo info;
  ASSERT_TRUE(ok.check(&info).ok());
  EXPECT_EQ(info.backend, fa::Backend::kCPU);
  EXPECT_EQ(info.algorithm, fa::Algorithm::kFA2);
  // A bf16 forward is named after the products that run it.
  {
    fa::testing::ScopedBf16Products products(cpu::Bf16Products::kFp32);
    ASSERT_TRUE(ok.check(&info).ok());
    EXPECT_EQ(info.kernel, std::string("cpu_fa2_fwd_") + cpu::tile_gemm_impl());
  }
  {
    fa::testing::ScopedBf16Products products(cpu::Bf16Products::kEmulated);
    ASSERT_TRUE(ok.check(&info).ok());
    EXPECT_EQ(info.kernel, "cpu_fa2_fwd_emulated");
  }
  if (cpu::amx_bf16_supported()) {
    fa::testing::ScopedBf16Products products(cpu::Bf16Products::kAmx);
    ASSERT_TRUE(ok.check(&info).ok());
    EXPECT_EQ(info.kernel, "cpu_fa2_fwd_amx");
  }
  // Head dims that are not a multiple of 32, and fp32 inputs, always take the fp32 products.
  const std::pair<fa::DType, int64_t> fp32_products[] = {{fa::DType::kBFloat16, 72}, {fa::DType::kFloat32, 64}};
  for (const auto& [dtype, head_dim] : fp32_products) {
    SmallProblem other(dtype, head_dim);
    fa::testing::ScopedBf16Products products(cpu::Bf16Products::kEmulated);
    ASSERT_TRUE(other.check(&info).ok());
    EXPECT_EQ(info.kernel, std::string("cpu_fa2_fwd_") + cpu::tile_gemm_impl());
  }

  fa::Capabilities caps = fa::detail::cpu_capabilities();
  EXPECT_TRUE(caps.available);
  EXPECT_EQ(caps.max_head_dim, 256);
  EXPECT_EQ(caps.dtypes.size(), 3u);
  EXPECT_TRUE(caps.backward && caps.causal && caps.window && caps.softcap && caps.gqa && caps.varlen);
}

}  // namespace
