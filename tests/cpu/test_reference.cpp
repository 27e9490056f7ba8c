// The float64 reference itself: hand-computed cases, gradients by finite differences, and agreement
// with its own same-precision naive path.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/attention_case.h"

using flashattn::AttentionArgs;
using flashattn::DType;
using flashattn::testing::CaseSpec;
using flashattn::testing::HostCase;
namespace harness = flashattn::harness;
namespace reference = flashattn::reference;

TEST(Reference, SingleKeyReturnsItsValue) {
  std::mt19937_64 rng(7);
  CaseSpec s;
  s.seqlen_q = 3;
  s.seqlen_k = 1;
  HostCase c(s, rng);
  reference::Result r;
  ASSERT_TRUE(reference::forward(c.args(), reference::Precision::kFloat64, &r).ok());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t x = 0; x < 32; ++x)
        EXPECT_DOUBLE_EQ(r.out[size_t((i * 2 + h) * 32 + x)], c.v.get((0 * 2 + h) * 32 + x));
}

TEST(Reference, TwoKeysByHand) {
  // d = 1, scale 1: q = 1, k = (0, 1), v = (2, 4) -> p = (1, e) / (1 + e).
  auto q = harness::HostTensor::make(DType::kFloat32, {1, 1, 1, 1});
  auto k = harness::HostTensor::make(DType::kFloat32, {1, 2, 1, 1});
  auto v = harness::HostTensor::make(DType::kFloat32, {1, 2, 1, 1});
  q.set(0, 1);
  k.set(0, 0);
  k.set(1, 1);
  v.set(0, 2);
  v.set(1, 4);
  AttentionArgs a;
  a.q = q.view;
  a.k = k.view;
  a.v = v.view;
  a.softmax_scale = 1.0f;
  reference::Result r;
  ASSERT_TRUE(reference::forward(a, reference::Precision::kFloat64, &r).ok());
  const double e = std::exp(1.0);
  EXPECT_NEAR(r.out[0], (2 + 4 * e) / (1 + e), 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(1 + e), 1e-12);
  a.causal = true;  // sq 1, sk 2: bottom-right alignment lets the single row see both keys
  ASSERT_TRUE(reference::forward(a, reference::Precision::kFloat64, &r).ok());
  EXPECT_NEAR(r.out[0], (2 + 4 * e) / (1 + e), 1e-12);
  a.window_left = 0;  // ...and a left window of 0 keeps only the diagonal key
  ASSERT_TRUE(reference::forward(a, reference::Precision::kFloat64, &r).ok());
  EXPECT_NEAR(r.out[0], 4.0, 1e-12);
}

// Loss L = sum(out * dout): the reference's gradients must match central differences of its forward.
TEST(Reference, GradientsMatchFiniteDifferences) {
  const uint64_t seed = harness::pick_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (bool causal : {false, true}) {
    CaseSpec s;
    s.seqlen_q = 5;
    s.seqlen_k = 7;
    s.heads_q = 4;
    s.heads_kv = 2;
    s.head_dim = 8;
    s.causal = causal;
    s.softcap = causal ? 0.0f : 2.0f;
    HostCase c(s, rng);
    reference::Result g;
    ASSERT_TRUE(reference::backward(c.backward_args(), reference::Precision::kFloat64, &g).ok());
    auto loss = [&] {
      reference::Result r;
      EXPECT_TRUE(reference::forward(c.args(), reference::Precision::kFloat64, &r).ok());
      double l = 0;
      for (int64_t i = 0; i < c.dout.numel(); ++i) l += r.out[size_t(i)] * c.dout.get(i);
      return l;
    };
    const double h = 1.0 / 256;  // exactly representable, so q +- h stays exact in fp32 for |q| <= 1
    for (auto [t, grad] : {std::pair{&c.q, &g.dq}, std::pair{&c.k, &g.dk}, std::pair{&c.v, &g.dv}}) {
      for (int64_t idx : {int64_t(0), t->numel() / 3, t->numel() - 1}) {
        const double x0 = t->get(idx);
        t->set(idx, x0 + h);
        const double lp = loss();
        t->set(idx, x0 - h);
        const double lm = loss();
        t->set(idx, x0);
        EXPECT_NEAR((*grad)[size_t(idx)], (lp - lm) / (2 * h), 2e-4) << "element " << idx;
      }
    }
  }
}

TEST(Reference, NaivePrecisionIsCloseToFloat64) {
  std::mt19937_64 rng(99);
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    CaseSpec s;
    s.dtype = dt;
    s.seqlen_q = 40;
    s.seqlen_k = 50;
    HostCase c(s, rng);
    reference::Result exact, naive;
    ASSERT_TRUE(reference::backward(c.backward_args(), reference::Precision::kFloat64, &exact).ok());
    ASSERT_TRUE(reference::backward(c.backward_args(), reference::Precision::kNaive, &naive).ok());
    const double tol = dt == DType::kFloat32 ? 1e-5 : (dt == DType::kFloat16 ? 5e-3 : 3e-2);
    EXPECT_LT(harness::max_abs_diff(exact.out, naive.out), tol) << flashattn::to_string(dt);
    EXPECT_LT(harness::max_abs_diff(exact.dq, naive.dq), tol * 4) << flashattn::to_string(dt);
    EXPECT_LT(harness::max_abs_diff(exact.dk, naive.dk), tol * 4) << flashattn::to_string(dt);
    EXPECT_LT(harness::max_abs_diff(exact.dv, naive.dv), tol * 4) << flashattn::to_string(dt);
    EXPECT_GT(harness::max_abs_diff(exact.out, naive.out), 0.0) << "naive path must round: " << flashattn::to_string(dt);
  }
}

TEST(Reference, ForwardRowMatchesFullForward) {
  std::mt19937_64 rng(5);
  CaseSpec s;
  s.seqlen_q = 9;
  s.seqlen_k = 12;
  s.heads_q = 4;
  s.heads_kv = 1;
  s.causal = true;
  s.lens_q = {4, 0, 5};
  s.lens_k = {6, 3, 12};
  HostCase c(s, rng);
  reference::Result r;
  ASSERT_TRUE(reference::forward(c.args(), reference::Precision::kFloat64, &r).ok());
  std::vector<double> row;
  double lse;
  ASSERT_TRUE(reference::forward_row(c.args(), {2, 3, 4}, &row, &lse).ok());
  const int64_t g = 4 + 0 + 4;  // packed row of sequence 2, row 4
  for (int64_t x = 0; x < s.head_dim; ++x) EXPECT_DOUBLE_EQ(row[size_t(x)], r.out[size_t((g * 4 + 3) * 32 + x)]);
  EXPECT_DOUBLE_EQ(lse, r.lse[size_t(3 * 9 + g)]);
}
