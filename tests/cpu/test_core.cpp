// src/core on its own: masks and KV block ranges against brute force, online softmax, 16-bit floats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/column_mask.h"
#include "core/mask.h"
#include "core/numeric.h"
#include "core/softmax_online.h"

namespace fc = flashattn::core;

namespace {

// The visibility rule written out from its definition, for comparison.
bool brute_visible(int64_t i, int64_t j, int64_t sq, int64_t sk, bool causal, int64_t wl, int64_t wr) {
  if (j < 0 || j >= sk) return false;
  const int64_t pos = i + sk - sq;
  const int64_t right = causal ? 0 : wr;
  return (right < 0 || j <= pos + right) && (wl < 0 || j >= pos - wl);
}

struct MaskCase {
  int64_t sq, sk;
  bool causal;
  int64_t wl, wr;
};

std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> cases;
  for (int64_t sq : {1, 7, 33, 100})
    for (int64_t sk : {1, 9, 33, 130})
      for (bool causal : {false, true})
        for (int64_t wl : {-1, 0, 5, 40})
          for (int64_t wr : {-1, 0, 3}) cases.push_back({sq, sk, causal, wl, wr});
  return cases;
}

}  // namespace

TEST(CoreMask, VisibleMatchesDefinition) {
  for (const MaskCase& c : mask_cases()) {
    auto m = fc::MaskSpec::make(c.sq, c.sk, c.causal, c.wl, c.wr);
    for (int64_t i = 0; i < c.sq; ++i)
      for (int64_t j = -1; j <= c.sk; ++j)
        ASSERT_EQ(m.visible(i, j), brute_visible(i, j, c.sq, c.sk, c.causal, c.wl, c.wr))
            << "sq " << c.sq << " sk " << c.sk << " causal " << c.causal << " w " << c.wl << "," << c.wr << " i "
            << i << " j " << j;
  }
}

TEST(CoreMask, CausalIsBottomRightAligned) {
  // seqlen_q 2, seqlen_k 5: row 0 sees keys 0..3, row 1 sees 0..4.
  auto m = fc::MaskSpec::make(2, 5, true, -1, -1);
  EXPECT_EQ(m.key_end(0), 4);
  EXPECT_EQ(m.key_end(1), 5);
  // seqlen_q 5, seqlen_k 2: rows 0..2 see nothing.
  auto n = fc::MaskSpec::make(5, 2, true, -1, -1);
  EXPECT_GE(n.key_begin(2), n.key_end(2));
  EXPECT_EQ(n.key_end(3), 1);
}

TEST(CoreMask, BlockRangeCoversEveryVisibleKeyAndFullyVisibleIsExact) {
  for (const MaskCase& c : mask_cases()) {
    auto m = fc::MaskSpec::make(c.sq, c.sk, c.causal, c.wl, c.wr);
    for (int64_t bm : {1, 4, 16})
      for (int64_t bn : {1, 8, 32})
        for (int64_t r0 = 0; r0 < c.sq; r0 += bm) {
          const int64_t r1 = std::min(c.sq, r0 + bm);
          fc::BlockRange range = fc::kv_block_range(m, r0, r1, bn);
          for (int64_t i = r0; i < r1; ++i)
            for (int64_t j = 0; j < c.sk; ++j)
              if (brute_visible(i, j, c.sq, c.sk, c.causal, c.wl, c.wr))
                ASSERT_TRUE(j / bn >= range.first && j / bn < range.last) << "visible key outside the range";
          for (int64_t blk = range.first; blk < range.last; ++blk) {
            const int64_t k0 = blk * bn, k1 = k0 + bn;
            bool all = true;
            for (int64_t i = r0; i < r1; ++i)
              for (int64_t j = k0; j < k1; ++j) all = all && brute_visible(i, j, c.sq, c.sk, c.causal, c.wl, c.wr);
            ASSERT_EQ(m.tile_fully_visible(r0, r1, k0, k1), all)
                << "rows " << r0 << ".." << r1 << " keys " << k0 << ".." << k1;
          }
        }
  }
}

TEST(CoreMask, MaskSpec32GivesMaskSpecKeysForEveryRow) {
  // The CPU cases, plus lengths and windows near the 32-bit range; rows past seqlen_q too (padded tiles).
  std::vector<MaskCase> cases = mask_cases();
  const int64_t big = int64_t(1) << 29;
  for (int64_t wl : {int64_t(-1), int64_t(0), int64_t(7), big, int64_t(INT32_MAX)})
    for (int64_t wr : {int64_t(-1), int64_t(0), int64_t(5), big, int64_t(INT32_MAX)}) {
      cases.push_back({big + 3, big - 5, false, wl, wr});
      cases.push_back({big - 5, big + 3, false, wl, wr});
      cases.push_back({3, big, true, wl, wr});
      cases.push_back({big, 3, false, wl, wr});
    }
  for (const MaskCase& c : cases) {
    const auto m = fc::MaskSpec::make(c.sq, c.sk, c.causal, c.wl, c.wr);
    const auto m32 = fc::MaskSpec32::make(int(c.sq), int(c.sk), c.causal, int(c.wl), int(c.wr));
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < std::min<int64_t>(c.sq, 200); ++i) rows.push_back(i);
    for (int64_t i = std::max<int64_t>(0, c.sq - 200); i < c.sq + 130; ++i) rows.push_back(i);
    for (int64_t row : rows) {
      const int64_t b = m.key_begin(row), e = m.key_end(row);
      const int b32 = m32.key_begin(int(row)), e32 = m32.key_end(int(row));
      ASSERT_GE(b32, 0);
      ASSERT_LE(e32, c.sk);
      if (row < c.sq || b < e)
        ASSERT_TRUE(b32 == b && e32 == e) << "sq " << c.sq << " sk " << c.sk << " causal " << c.causal << " wl "
                                          << c.wl << " wr " << c.wr << " row " << row << ": [" << b << ", " << e
                                          << ") against [" << b32 << ", " << e32 << ")";
      else
        ASSERT_GE(b32, e32) << "row " << row << " past seqlen_q sees no key in MaskSpec";
    }
  }
}

// MaskSpec32::blocks_seen_up_to, which lets an fa3 consumer warpgroup pass over the key blocks its rows do
// not see: no row up to `row` sees a key in a block from the returned one on, the bound is tight for `row`
// itself, and it never falls as the row grows.
TEST(CoreMask, BlocksSeenUpToHoldEveryKeyOfTheRowsBefore) {
  for (const MaskCase& c : mask_cases()) {
    const auto m32 = fc::MaskSpec32::make(int(c.sq), int(c.sk), c.causal, int(c.wl), int(c.wr));
    for (int bn : {1, 8, 32, 64}) {
      int before = 0;
      for (int64_t row = 0; row < c.sq; ++row) {
        const int n = m32.blocks_seen_up_to(int(row), bn);
        ASSERT_GE(n, before) << "row " << row;
        before = n;
        for (int64_t i = 0; i <= row; ++i)
          for (int64_t j = int64_t(n) * bn; j < c.sk; ++j)
            ASSERT_FALSE(brute_visible(i, j, c.sq, c.sk, c.causal, c.wl, c.wr))
                << "sq " << c.sq << " sk " << c.sk << " causal " << c.causal << " w " << c.wl << "," << c.wr
                << " block " << bn << ": row " << i << " sees key " << j << ", past the " << n << " blocks of row "
                << row;
        if (n > 0 && m32.key_begin(int(row)) < m32.key_end(int(row)))
          ASSERT_TRUE(brute_visible(row, m32.key_end(int(row)) - 1, c.sq, c.sk, c.causal, c.wl, c.wr))
              << "the last block holds no key of row " << row;
      }
    }
  }
}

template <int kGroups>
void check_column_mask() {
  using M = fc::ColumnMask<kGroups>;
  for (int lo = -40; lo <= 8 * kGroups + 40; ++lo)
    for (int hi = -40; hi <= 8 * kGroups + 40; ++hi) {
      const typename M::Word bits = M::visible(lo, hi);
      typename M::Word expected = 0;
      for (int j = 0; j < kGroups; ++j)
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * j + e;
          if (col >= lo && col < hi) expected |= typename M::Word(1) << M::bit(j, e);
        }
      ASSERT_EQ(bits, expected) << "groups " << kGroups << " lo " << lo << " hi " << hi;
    }
}

TEST(CoreMask, ColumnMaskSetsTheBitsOfTheVisibleColumns) {
  check_column_mask<1>();
  check_column_mask<8>();   // fa2: 64-key blocks
  check_column_mask<10>();  // 80 keys
  check_column_mask<16>();  // 32 bits: fa3's 128-key blocks
  check_column_mask<22>();  // a 64-bit word
  check_column_mask<32>();  // 64 bits: 256 keys
}

TEST(CoreSoftmax, OnlineUpdateMatchesDirectSoftmax) {
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> s(300);
  for (float& x : s) x = dist(rng);
  // Direct: lse and weighted sum of values v_j = j.
  double m = -INFINITY, sum = 0, acc = 0;
  for (float x : s) m = std::max(m, double(x));
  for (size_t j = 0; j < s.size(); ++j) {
    sum += std::exp(double(s[j]) - m);
    acc += std::exp(double(s[j]) - m) * double(j);
  }
  const double lse_direct = m + std::log(sum), out_direct = acc / sum;
  // Online, tiles of 37, scores given in log2 units.
  fc::OnlineSoftmaxRow row;
  float o = 0;
  for (size_t t = 0; t < s.size(); t += 37) {
    float tmax = fc::kNegInf;
    for (size_t j = t; j < std::min(s.size(), t + 37); ++j) tmax = std::max(tmax, s[j] * fc::kLog2e);
    o *= row.begin_tile(tmax);
    float tsum = 0;
    for (size_t j = t; j < std::min(s.size(), t + 37); ++j) {
      float p = std::exp2(s[j] * fc::kLog2e - row.safe_max());
      tsum += p;
      o += p * float(j);
    }
    row.add(tsum);
  }
  EXPECT_NEAR(row.lse(), lse_direct, 1e-4 * std::fabs(lse_direct) + 1e-5);
  EXPECT_NEAR(o * row.inv_sum(), out_direct, 1e-4 * std::fabs(out_direct));
}

TEST(CoreSoftmax, RowWithoutKeysGivesZeroAndMinusInfinity) {
  fc::OnlineSoftmaxRow row;
  EXPECT_EQ(row.begin_tile(fc::kNegInf), 1.0f);  // -inf - -inf must not produce NaN
  EXPECT_EQ(std::exp2(fc::kNegInf - row.safe_max()), 0.0f);
  EXPECT_EQ(row.inv_sum(), 0.0f);
  EXPECT_EQ(row.lse(), fc::kNegInf);
}

TEST(CoreSoftmax, MergeLse) {
  EXPECT_NEAR(fc::merge_lse(std::log(2.0f), std::log(3.0f)), std::log(5.0f), 1e-6);
  EXPECT_EQ(fc::merge_lse(fc::kNegInf, fc::kNegInf), fc::kNegInf);
  EXPECT_NEAR(fc::merge_lse(fc::kNegInf, 1.5f), 1.5f, 1e-6);
}

TEST(CoreSoftcap, ValueAndDerivative) {
  const float cap = 5.0f;
  for (float s : {-20.0f, -1.0f, 0.0f, 0.3f, 4.0f, 50.0f}) {
    const float t = fc::apply_softcap(s, cap);
    EXPECT_NEAR(t, cap * std::tanh(s / cap), 1e-6);
    const float h = 1e-3f;
    const float numeric = (fc::apply_softcap(s + h, cap) - fc::apply_softcap(s - h, cap)) / (2 * h);
    EXPECT_NEAR(fc::softcap_grad(t, cap), numeric, 2e-3);
  }
}

TEST(CoreNumeric, HalfRoundTripIsExactForEveryBitPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = fc::fp16_bits_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fc::fp16_bits_to_float(fc::float_to_fp16_bits(f))));
      continue;
    }
    ASSERT_EQ(fc::float_to_fp16_bits(f), h) << "fp16 bits " << b;
    const float g = fc::bf16_bits_to_float(h);
    if (!std::isnan(g)) ASSERT_EQ(fc::float_to_bf16_bits(g), h) << "bf16 bits " << b;
  }
}

TEST(CoreNumeric, RoundsToNearestEven) {
  EXPECT_EQ(fc::fp16_bits_to_float(fc::float_to_fp16_bits(1.0f + 1.0f / 2048)), 1.0f);  // tie -> even
  EXPECT_EQ(fc::fp16_bits_to_float(fc::float_to_fp16_bits(1.0f + 3.0f / 2048)), 1.0f + 4.0f / 2048);
  EXPECT_EQ(fc::fp16_bits_to_float(fc::float_to_fp16_bits(70000.0f)), INFINITY);
  EXPECT_EQ(fc::bf16_bits_to_float(fc::float_to_bf16_bits(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(fc::fp16_bits_to_float(fc::float_to_fp16_bits(3e-8f)), 5.9604644775390625e-8f);  // subnormal
}
