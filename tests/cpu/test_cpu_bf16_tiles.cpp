// The bf16 tile products of the CPU kernels (src/cpu/bf16_tiles.h): the packed layouts against their
// definition, the probability rows (exponentials split into hi + lo), the splits of rows and of their
// transpose, and the products against float64, for AMX (where this CPU has it) and
// for the portable emulation of the same layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/bf16_products.h"
#include "core/numeric.h"
#include "cpu/bf16_tiles.h"
#include "reference/harness.h"

namespace cpu = flashattn::detail::cpu;
namespace core = flashattn::core;
using cpu::Bf16Products;

namespace {

constexpr uint16_t kPoison = 0xffff;  // a bf16 NaN: any element a pack leaves unwritten shows

// Element (row, col) of a packed [k x n] B, as bf16_tiles.h defines the layout (written out again here).
int64_t packed_index(int64_t k, int64_t row, int64_t col) {
  const int64_t tile = (col / 16) * (k / 32) + row / 32;
  return tile * 512 + ((row % 32) / 2) * 32 + 2 * (col % 16) + row % 2;
}

std::vector<uint16_t> random_bf16(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = core::float_to_bf16_bits(dist(rng));
  return v;
}

class Bf16Tiles : public ::testing::TestWithParam<Bf16Products> {
 protected:
  void SetUp() override {
    if (!flashattn::testing::bf16_products_runnable(GetParam()))
      GTEST_SKIP() << "this CPU (or this build) has no AMX bf16 tile multiplies";
  }
};

TEST_P(Bf16Tiles, PacksFollowTheLayoutAndZeroThePadding) {
  const uint64_t seed = flashattn::harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int64_t d : {32, 64, 96, 128, 256})
    for (int64_t keys : {1, 15, 16, 17, 31, 32, 33, 100, 128}) {
      SCOPED_TRACE("d " + std::to_string(d) + " keys " + std::to_string(keys));
      const int64_t keys_pad = cpu::round_up_to_tile(keys), ld = d + 8;
      const std::vector<uint16_t> rows = random_bf16(size_t(keys * ld), rng);
      std::vector<uint16_t> kt(size_t(keys_pad * d), kPoison), v(size_t(keys_pad * d), kPoison);
      cpu::pack_kt(GetParam(), rows.data(), ld, keys, keys_pad, d, kt.data());
      cpu::pack_v(GetParam(), rows.data(), ld, keys, keys_pad, d, v.data());
      for (int64_t r = 0; r < keys_pad; ++r)
        for (int64_t j = 0; j < d; ++j) {
          const uint16_t want = r < keys ? rows[size_t(r * ld + j)] : 0;
          ASSERT_EQ(kt[size_t(packed_index(d, j, r))], want) << "K^T key " << r << " dim " << j;
          ASSERT_EQ(v[size_t(packed_index(keys_pad, r, j))], want) << "V key " << r << " dim " << j;
        }
    }
}

TEST_P(Bf16Tiles, ProbabilityRowsCarrySixteenBitsAndZeroTheRest) {
  const uint64_t seed = flashattn::harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-30.0f, 10.0f);
  const float scale = 0.72134752f, shift = 6.5f;  // exponents from -28 down to -128: a few underflow to 0
  const int64_t n_pad = 96;
  const std::pair<int64_t, int64_t> ranges[] = {{0, 96}, {0, 1}, {5, 90}, {17, 18}, {40, 40}, {31, 65}, {0, 77}};
  for (auto [begin, end] : ranges) {
    SCOPED_TRACE("columns [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
    // Scores outside [begin, end) are NaN: reading one would show.
    std::vector<float> s(size_t(n_pad), std::numeric_limits<float>::quiet_NaN());
    for (int64_t c = begin; c < end; ++c) s[size_t(c)] = dist(rng);
    std::vector<uint16_t> hi(size_t(n_pad), kPoison), lo(size_t(n_pad), kPoison);
    const float sum = cpu::exp2_split_row(GetParam(), s.data(), n_pad, begin, end, scale, shift, hi.data(), lo.data());
    double exact_sum = 0.0;
    for (int64_t c = 0; c < n_pad; ++c) {
      const double h = core::bf16_bits_to_float(hi[size_t(c)]), l = core::bf16_bits_to_float(lo[size_t(c)]);
      if (c < begin || c >= end) {
        ASSERT_EQ(hi[size_t(c)], 0) << "column " << c;
        ASSERT_EQ(lo[size_t(c)], 0) << "column " << c;
        continue;
      }
      const double exact = std::exp2(double(s[size_t(c)]) * double(scale) - double(shift));
      exact_sum += exact;
      if (exact < std::ldexp(1.0, -124)) continue;  // may flush to 0 at the edge of the range
      ASSERT_LE(std::abs(h + l - exact), std::ldexp(exact, -16)) << "column " << c;
      ASSERT_LE(std::abs(l), std::ldexp(std::abs(h), -8)) << "lo is the remainder of hi, column " << c;
    }
    EXPECT_LE(std::abs(double(sum) - exact_sum), std::ldexp(exact_sum, -16) + 1e-37);  // 96 fp32 additions
  }
}

TEST_P(Bf16Tiles, BackwardRowsGiveProbabilitiesAndDs) {
  const uint64_t seed = flashattn::harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> score(-30.0f, 9.0f), grad(-2.0f, 2.0f);
  const float scale = 0.72134752f, shift = 6.5f, delta = 0.375f;
  for (int64_t n : {1, 15, 16, 17, 45, 64, 128}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> s(size_t(n) + 1), ds(size_t(n) + 1);
    for (float& v : s) v = score(rng);
    for (float& v : ds) v = grad(rng);
    s[size_t(n)] = ds[size_t(n)] = std::numeric_limits<float>::quiet_NaN();  // past the row: left alone
    const std::vector<float> s0 = s, ds0 = ds;
    cpu::exp2_ds_row(GetParam(), s.data(), ds.data(), n, scale, shift, delta);
    for (int64_t c = 0; c < n; ++c) {
      const double p = std::exp2(double(s0[size_t(c)]) * scale - shift);
      if (p < std::ldexp(1.0, -124)) continue;  // may flush to 0 at the edge of the range
      // The fp32 argument s * scale - shift (|s * scale| < 32) alone may be off by 2^-19.
      ASSERT_LE(std::abs(double(s[size_t(c)]) - p), std::ldexp(p, -18)) << "p, column " << c;
      const double want = p * (double(ds0[size_t(c)]) - delta);
      ASSERT_LE(std::abs(double(ds[size_t(c)]) - want), std::ldexp(p * (std::abs(ds0[size_t(c)]) + delta), -18))
          << "ds, column " << c;
    }
    EXPECT_TRUE(std::isnan(s[size_t(n)]) && std::isnan(ds[size_t(n)])) << "wrote past the row";
  }
}

// hi and lo of one value, as bf16_tiles.h defines them.
std::pair<uint16_t, uint16_t> split_of(float v) {
  const uint16_t hi = core::float_to_bf16_bits(v);
  return {hi, core::float_to_bf16_bits(v - core::bf16_bits_to_float(hi))};
}

TEST_P(Bf16Tiles, SplitsOfRowsAndOfTheTransposeFollowTheDefinition) {
  const uint64_t seed = flashattn::harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  const int64_t rows = 37, cols = 45, rows_pad = 64, cols_pad = 64, ldx = 50, ld = 70;
  std::vector<float> x(size_t(rows * ldx));
  for (float& v : x) v = dist(rng);
  std::vector<uint16_t> hi(size_t(rows_pad * ld), kPoison), lo(size_t(rows_pad * ld), kPoison);
  cpu::split_rows(GetParam(), x.data(), ldx, rows, cols, cols_pad, hi.data(), lo.data(), ld);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols_pad; ++c) {
      const auto [h, l] = c < cols ? split_of(x[size_t(r * ldx + c)]) : std::pair<uint16_t, uint16_t>{0, 0};
      ASSERT_EQ(hi[size_t(r * ld + c)], h) << "rows: row " << r << " col " << c;
      ASSERT_EQ(lo[size_t(r * ld + c)], l) << "rows: row " << r << " col " << c;
    }
  std::fill(hi.begin(), hi.end(), kPoison);
  std::fill(lo.begin(), lo.end(), kPoison);
  cpu::split_transposed(GetParam(), x.data(), ldx, rows, cols, rows_pad, cols_pad, hi.data(), lo.data(), ld);
  for (int64_t c = 0; c < cols_pad; ++c)
    for (int64_t r = 0; r < rows_pad; ++r) {
      const bool inside = r < rows && c < cols;
      const auto [h, l] = inside ? split_of(x[size_t(r * ldx + c)]) : std::pair<uint16_t, uint16_t>{0, 0};
      ASSERT_EQ(hi[size_t(c * ld + r)], h) << "transposed: row " << c << " col " << r;
      ASSERT_EQ(lo[size_t(c * ld + r)], l) << "transposed: row " << c << " col " << r;
    }
}

struct ProductCase {
  int64_t m, n, k;
  bool a_lo, b_lo, accumulate;
};

TEST_P(Bf16Tiles, ProductsMatchFloat64) {
  const uint64_t seed = flashattn::harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  cpu::Bf16TileScope tiles(GetParam());
  const ProductCase cases[] = {{32, 32, 32, false, false, false}, {64, 96, 128, true, false, false},
                               {96, 32, 256, false, true, true},  {32, 128, 64, true, true, true},
                               {256, 64, 32, true, false, true},  {64, 64, 96, true, true, false}};
  for (const ProductCase& g : cases) {
    SCOPED_TRACE(::testing::Message() << "m " << g.m << " n " << g.n << " k " << g.k << " a_lo " << g.a_lo
                                      << " b_lo " << g.b_lo << " accumulate " << g.accumulate);
    const int64_t lda = g.k + 16, ldc = g.n + 8;
    const std::vector<uint16_t> a = random_bf16(size_t(g.m * lda), rng), a_lo = random_bf16(size_t(g.m * lda), rng);
    // B and its second term as rows ([k x n] row-major): pack_v is B itself in the packed layout.
    const std::vector<uint16_t> b = random_bf16(size_t(g.k * g.n), rng), b_lo = random_bf16(size_t(g.k * g.n), rng);
    std::vector<uint16_t> packed(size_t(g.k * g.n), kPoison), packed_lo(size_t(g.k * g.n), kPoison);
    cpu::pack_v(GetParam(), b.data(), g.n, g.k, g.k, g.n, packed.data());
    cpu::pack_v(GetParam(), b_lo.data(), g.n, g.k, g.k, g.n, packed_lo.data());
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> c(size_t(g.m * ldc));
    // Without accumulate C must not be read: NaN would show.
    for (float& e : c) e = g.accumulate ? dist(rng) : std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> c0 = c;
    cpu::bf16_gemm(GetParam(), g.m, g.n, g.k, a.data(), g.a_lo ? a_lo.data() : nullptr, lda, packed.data(),
                   g.b_lo ? packed_lo.data() : nullptr, g.accumulate, c.data(), ldc);
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double exact = g.accumulate ? double(c0[size_t(i * ldc + j)]) : 0.0, magnitude = std::abs(exact);
        for (int64_t t = 0; t < g.k; ++t) {
          const double ah = core::bf16_bits_to_float(a[size_t(i * lda + t)]);
          const double al = g.a_lo ? core::bf16_bits_to_float(a_lo[size_t(i * lda + t)]) : 0.0;
          const double bh = core::bf16_bits_to_float(b[size_t(t * g.n + j)]);
          const double bl = g.b_lo ? core::bf16_bits_to_float(b_lo[size_t(t * g.n + j)]) : 0.0;
          // A B + A_lo B + A B_lo: the lo x lo term is left out by definition.
          for (double term : {ah * bh, al * bh, ah * bl}) {
            exact += term;
            magnitude += std::abs(term);
          }
        }
        // fp32 sums of 3k products: each step rounds by at most 2^-24 of the running magnitude.
        const double bound = double(3 * g.k + 1) * std::ldexp(magnitude, -24) + 1e-30;
        ASSERT_LE(std::abs(double(c[size_t(i * ldc + j)]) - exact), bound) << "C(" << i << ", " << j << ")";
      }
  }
}

TEST_P(Bf16Tiles, Fp16RowsSplitExactlyIntoTwoTerms) {
  const uint64_t seed = flashattn::harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t rows = 9, d = 64, ld = 80;
  std::vector<uint16_t> src(size_t(rows * ld));
  std::uniform_int_distribution<int> bits(0, 0xffff);
  for (uint16_t& v : src) {
    v = uint16_t(bits(rng));
    if ((v & 0x7c00) == 0x7c00) v = uint16_t(v & 0x83ff);  // no inf or NaN: every finite fp16, subnormals too
  }
  std::vector<uint16_t> hi(size_t(rows * d), kPoison), lo(size_t(rows * d), kPoison);
  const cpu::Bf16Terms t = cpu::bf16_terms(GetParam(), /*fp16=*/true, src.data(), ld, rows, d, hi.data(), lo.data());
  ASSERT_EQ(t.hi, hi.data());
  ASSERT_EQ(t.lo, lo.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < d; ++j) {
      const float value = core::fp16_bits_to_float(src[size_t(r * ld + j)]);
      const float sum = core::bf16_bits_to_float(hi[size_t(r * d + j)]) + core::bf16_bits_to_float(lo[size_t(r * d + j)]);
      ASSERT_EQ(sum, value) << "row " << r << " dim " << j;
    }
  // bf16 rows are one term, read in place.
  const cpu::Bf16Terms in_place =
      cpu::bf16_terms(GetParam(), /*fp16=*/false, src.data(), ld, rows, d, nullptr, nullptr);
  EXPECT_EQ(in_place.hi, src.data());
  EXPECT_EQ(in_place.lo, nullptr);
  EXPECT_EQ(in_place.ld, ld);
}

INSTANTIATE_TEST_SUITE_P(Products, Bf16Tiles, ::testing::Values(Bf16Products::kAmx, Bf16Products::kEmulated),
                         [](const ::testing::TestParamInfo<Bf16Products>& info) {
                           return std::string(cpu::bf16_products_name(info.param));
                         });

TEST(Bf16Products, OverrideAndFallback) {
  {
    flashattn::testing::ScopedBf16Products scoped(Bf16Products::kEmulated);
    EXPECT_EQ(cpu::bf16_products(), Bf16Products::kEmulated);
  }
  {
    flashattn::testing::ScopedBf16Products scoped(Bf16Products::kAmx);
    EXPECT_EQ(cpu::bf16_products(), cpu::amx_bf16_supported() ? Bf16Products::kAmx : Bf16Products::kFp32);
  }
  {
    flashattn::testing::ScopedBf16Products scoped(Bf16Products::kFp32);
    EXPECT_EQ(cpu::bf16_products(), Bf16Products::kFp32);
  }
  EXPECT_STREQ(cpu::bf16_products_name(Bf16Products::kAmx), "amx");
  EXPECT_STREQ(cpu::bf16_products_name(Bf16Products::kFp32), "fp32");
}

}  // namespace
