// The CPU backend against the float64 reference, forward and backward, with the tolerance rule:
// error <= 2 x (error of the same-precision naive computation) + floor. Fresh seeded inputs each run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/attention_case.h"
#include "common/bf16_products.h"
#include "common/random_case.h"
#include "cpu/tile_gemm.h"

namespace fa = flashattn;
using fa::DType;
using fa::testing::CaseSpec;
using fa::testing::expect_matches_reference;
using fa::testing::HostCase;
namespace harness = fa::harness;
namespace reference = fa::reference;
using Bf16Products = fa::detail::cpu::Bf16Products;

namespace {

CaseSpec make(int64_t sq, int64_t sk, int64_t d, DType dt, bool causal = false) {
  CaseSpec s;
  s.batch = 2;
  s.seqlen_q = sq;
  s.seqlen_k = sk;
  s.heads_q = 2;
  s.heads_kv = 2;
  s.head_dim = d;
  s.dtype = dt;
  s.causal = causal;
  return s;
}

std::vector<CaseSpec> cases() {
  std::vector<CaseSpec> v;
  for (int64_t n : {1, 17, 113, 1007})
    for (bool causal : {false, true}) v.push_back(make(n, n, 64, DType::kFloat32, causal));
  const std::pair<int64_t, int64_t> pairs[] = {{113, 203}, {1023, 1024}, {1024, 1023}, {1, 239}, {799, 3}};
  for (auto [sq, sk] : pairs) {
    v.push_back(make(sq, sk, 64, DType::kBFloat16, true));
    v.push_back(make(sq, sk, 64, DType::kFloat16, false));
  }
  for (int64_t d : {32, 64, 72, 96, 128, 256}) v.push_back(make(113, 203, d, DType::kFloat32, d % 64 == 0));
  CaseSpec gqa = make(65, 130, 64, DType::kBFloat16, true);
  gqa.heads_q = 16;
  gqa.heads_kv = 2;  // 8:1
  v.push_back(gqa);
  CaseSpec mqa = make(77, 77, 32, DType::kFloat16);
  mqa.heads_q = 6;
  mqa.heads_kv = 1;
  v.push_back(mqa);
  CaseSpec win = make(300, 280, 64, DType::kFloat32);
  win.window_left = 32;
  win.window_right = 8;
  v.push_back(win);
  CaseSpec wc = win;
  wc.causal = true;
  wc.dtype = DType::kBFloat16;
  v.push_back(wc);
  CaseSpec cap = make(150, 170, 64, DType::kFloat32);
  cap.softcap = 0.5f;  // small enough to bend the scores of unit inputs
  cap.scale = 0.5f;
  v.push_back(cap);
  CaseSpec varlen = make(0, 0, 64, DType::kFloat32, true);
  varlen.lens_q = {17, 0, 113, 1, 40};
  varlen.lens_k = {31, 5, 113, 0, 20};  // an empty q sequence, an empty k sequence, q longer than k
  varlen.varlen_tail_rows = 2;          // packed rows after the last sequence: out 0, lse -inf, gradients 0
  varlen.heads_q = 4;
  varlen.heads_kv = 2;
  v.push_back(varlen);
  CaseSpec vb = varlen;
  vb.dtype = DType::kBFloat16;
  vb.causal = false;
  vb.window_left = 10;
  v.push_back(vb);
  CaseSpec strided = make(97, 131, 64, DType::kFloat16, true);
  strided.layout = fa::testing::Layout::kPadded;  // every row padded by kRowPadElems
  v.push_back(strided);
  return v;
}

class CpuAttention : public ::testing::TestWithParam<CaseSpec> {};

void expect_lse(const HostCase& c, const std::vector<double>& exact, const std::vector<double>& naive) {
  // -inf marks rows with no visible key: it must appear exactly where the reference has it.
  for (int64_t i = 0; i < c.lse.numel(); ++i)
    ASSERT_EQ(std::isinf(c.lse.get(i)), std::isinf(exact[size_t(i)])) << "lse row " << i;
  expect_matches_reference("lse", c.lse, exact, naive, c.spec.dtype);
}

// The outputs of c against the float64 reference, with the tolerance rule.
void expect_forward_matches(const HostCase& c) {
  reference::Result exact, naive;
  ASSERT_TRUE(reference::forward(c.args(), reference::Precision::kFloat64, &exact).ok());
  ASSERT_TRUE(reference::forward(c.args(), reference::Precision::kNaive, &naive).ok());
  expect_matches_reference("out", c.out, exact.out, naive.out, c.spec.dtype);
  expect_lse(c, exact.lse, naive.lse);
}

// The gradients of c against the float64 reference, with the tolerance rule.
void expect_backward_matches(const HostCase& c) {
  reference::Result exact, naive;
  ASSERT_TRUE(reference::backward(c.backward_args(), reference::Precision::kFloat64, &exact).ok());
  ASSERT_TRUE(reference::backward(c.backward_args(), reference::Precision::kNaive, &naive).ok());
  expect_matches_reference("dq", c.dq, exact.dq, naive.dq, c.spec.dtype);
  expect_matches_reference("dk", c.dk, exact.dk, naive.dk, c.spec.dtype);
  expect_matches_reference("dv", c.dv, exact.dv, naive.dv, c.spec.dtype);
}

TEST_P(CpuAttention, ForwardMatchesReference) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE(GetParam().name() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostCase c(GetParam(), rng);
  fa::RunInfo info;
  fa::Status s = fa::forward(c.args(), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(info.backend, fa::Backend::kCPU);
  expect_forward_matches(c);
}

TEST_P(CpuAttention, BackwardMatchesReference) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE(GetParam().name() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostCase c(GetParam(), rng);
  fa::Status s = fa::forward(c.args());
  ASSERT_TRUE(s.ok()) << s.to_string();
  fa::RunInfo info;
  s = fa::backward(c.backward_args(), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  expect_backward_matches(c);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuAttention, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) {
                           std::string n = std::to_string(info.index) + "_" + info.param.name();
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// bf16 and fp16 forwards and backwards under each way of multiplying bf16 tiles (bf16_tiles.h): AMX where
// this CPU has it, the portable emulation of its layout (so padding, packing, the fp16 split and the P split
// are checked on any machine), and the fp32 products on converted rows.
std::vector<CaseSpec> bf16_cases() {
  std::vector<CaseSpec> v;
  // The edge shapes and features of cases() in half precision (their fp32 cases in bf16), at the head dims
  // the tile products take and lengths up to 1000 (the emulation multiplies with scalar loops).
  for (CaseSpec c : cases()) {
    if (c.head_dim % 32 != 0 || std::max(c.seqlen_q, c.seqlen_k) > 1000) continue;
    if (c.dtype == DType::kFloat32) c.dtype = DType::kBFloat16;
    v.push_back(c);
  }
  v.push_back(make(113, 203, 128, DType::kFloat16, true));
  v.push_back(make(200, 230, 256, DType::kFloat16));
  CaseSpec negative = make(97, 120, 64, DType::kBFloat16, true);
  negative.scale = -40.0f;  // any finite scale is taken; a negative one must not be folded into the exponentials
  v.push_back(negative);
  v.push_back(make(113, 203, 192, DType::kBFloat16, true));
  v.push_back(make(300, 17, 128, DType::kBFloat16, true));
  v.push_back(make(600, 700, 64, DType::kBFloat16));  // several query tiles and KV blocks
  CaseSpec gqa = make(65, 130, 128, DType::kBFloat16, true);
  gqa.heads_q = 16;
  gqa.heads_kv = 2;
  v.push_back(gqa);
  return v;
}

using Bf16ProductsCase = std::tuple<Bf16Products, CaseSpec>;

// The kernel name a call of bf16_cases reports under `products` (every head dim there is a multiple of 32).
std::string expected_kernel(const std::string& direction, Bf16Products products) {
  const char* impl = products == Bf16Products::kFp32 ? fa::detail::cpu::tile_gemm_impl()
                                                      : fa::detail::cpu::bf16_products_name(products);
  return "cpu_fa2_" + direction + "_" + impl;
}

// Runs each case under its products (skipped where they cannot run) on fresh seeded inputs.
class CpuBf16Products : public ::testing::TestWithParam<Bf16ProductsCase> {
 protected:
  void SetUp() override {
    if (!fa::testing::bf16_products_runnable(products()))
      GTEST_SKIP() << "this CPU (or this build) has no AMX bf16 tile multiplies";
    scoped_.emplace(products());
    seed_ = harness::pick_seed();
  }
  Bf16Products products() const { return std::get<0>(GetParam()); }
  const CaseSpec& spec() const { return std::get<1>(GetParam()); }
  std::string trace() const { return spec().name() + " seed " + std::to_string(seed_); }
  uint64_t seed_ = 0;

 private:
  std::optional<fa::testing::ScopedBf16Products> scoped_;
};

class CpuBf16Forward : public CpuBf16Products {};
class CpuBf16Backward : public CpuBf16Products {};

TEST_P(CpuBf16Forward, MatchesReferenceAndIsDeterministic) {
  SCOPED_TRACE(trace());
  std::mt19937_64 rng(seed_);
  HostCase c(spec(), rng);
  fa::RunInfo info;
  ASSERT_TRUE(fa::forward(c.args(), &info).ok());
  EXPECT_EQ(info.kernel, expected_kernel("fwd", products()));
  expect_forward_matches(c);
  // The same bits from one worker as from all of them.
  const std::vector<uint8_t> out = c.out.storage, lse = c.lse.storage;
  c.poison_outputs();
  fa::AttentionArgs one = c.args();
  one.num_threads = 1;
  ASSERT_TRUE(fa::forward(one).ok());
  EXPECT_TRUE(out == c.out.storage && lse == c.lse.storage) << "one worker gave other bits";
}

std::vector<uint8_t> gradient_bytes(const HostCase& c) {
  std::vector<uint8_t> bytes;
  for (const harness::HostTensor* t : {&c.dq, &c.dk, &c.dv}) bytes.insert(bytes.end(), t->storage.begin(), t->storage.end());
  return bytes;
}

TEST_P(CpuBf16Backward, MatchesReferenceAndIsDeterministic) {
  SCOPED_TRACE(trace());
  std::mt19937_64 rng(seed_);
  HostCase c(spec(), rng);
  ASSERT_TRUE(fa::forward(c.args()).ok());
  fa::RunInfo info;
  ASSERT_TRUE(fa::backward(c.backward_args(), &info).ok());
  EXPECT_EQ(info.kernel, expected_kernel("bwd", products()));
  expect_backward_matches(c);
  // The same bits from one worker as from all of them (the forward's outputs stay: the backward reads them).
  const std::vector<uint8_t> grads = gradient_bytes(c);
  fa::BackwardArgs one = c.backward_args();
  one.fwd.num_threads = 1;
  for (harness::HostTensor* t : {&c.dq, &c.dk, &c.dv}) harness::poison(t);
  ASSERT_TRUE(fa::backward(one).ok());
  EXPECT_TRUE(grads == gradient_bytes(c)) << "one worker gave other bits";
}

auto bf16_product_cases() {
  return ::testing::Combine(::testing::Values(Bf16Products::kAmx, Bf16Products::kEmulated, Bf16Products::kFp32),
                            ::testing::ValuesIn(bf16_cases()));
}

std::string bf16_case_name(const ::testing::TestParamInfo<Bf16ProductsCase>& info) {
  std::string n = std::string(fa::detail::cpu::bf16_products_name(std::get<0>(info.param))) + "_" +
                  std::to_string(info.index) + "_" + std::get<1>(info.param).name();
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Products, CpuBf16Forward, bf16_product_cases(), bf16_case_name);
INSTANTIATE_TEST_SUITE_P(Products, CpuBf16Backward, bf16_product_cases(), bf16_case_name);

TEST(CpuAttentionEdge, RowsThatSeeNoKeyGiveZeroAndMinusInfinity) {
  std::mt19937_64 rng(11);
  CaseSpec s = make(10, 4, 32, DType::kFloat32, true);  // rows 0..5 see no key
  HostCase c(s, rng);
  ASSERT_TRUE(fa::forward(c.args()).ok());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 10; ++i) {
        const double lse = c.lse.get((b * 2 + h) * 10 + i);
        if (i < 6) {
          EXPECT_EQ(lse, -INFINITY);
          for (int64_t x = 0; x < 32; ++x) EXPECT_EQ(c.out.get(((b * 10 + i) * 2 + h) * 32 + x), 0.0);
        } else {
          EXPECT_TRUE(std::isfinite(lse));
        }
      }
  ASSERT_TRUE(fa::backward(c.backward_args()).ok());
  EXPECT_EQ(harness::count_nan(c.dq), 0);
}

TEST(CpuAttentionEdge, EmptyKeysAndEmptyBatch) {
  std::mt19937_64 rng(12);
  HostCase c(make(5, 0, 16, DType::kFloat32), rng);
  ASSERT_TRUE(fa::forward(c.args()).ok());
  for (int64_t i = 0; i < c.out.numel(); ++i) ASSERT_EQ(c.out.get(i), 0.0);
  for (int64_t i = 0; i < c.lse.numel(); ++i) ASSERT_EQ(c.lse.get(i), -INFINITY);
  CaseSpec empty = make(5, 5, 16, DType::kFloat32);
  empty.batch = 0;
  HostCase e(empty, rng);
  EXPECT_TRUE(fa::forward(e.args()).ok());
}

// A view without elements addresses nothing: its strides are not checked (numpy reports 0 for every stride of
// an empty array, the last dimension's included).
TEST(CpuAttentionEdge, EmptyViewsWithZeroStrides) {
  std::mt19937_64 rng(14);
  HostCase c(make(5, 0, 16, DType::kFloat32), rng);
  fa::AttentionArgs a = c.args();
  for (fa::TensorView* t : {&a.k, &a.v}) std::fill(std::begin(t->stride), std::end(t->stride), int64_t(0));
  ASSERT_TRUE(fa::forward(a).ok());
  for (int64_t i = 0; i < c.out.numel(); ++i) ASSERT_EQ(c.out.get(i), 0.0);
  HostCase e(make(0, 7, 16, DType::kFloat32), rng);
  fa::BackwardArgs b = e.backward_args();
  for (fa::TensorView* t : {&b.fwd.q, &b.fwd.out, &b.fwd.lse, &b.dout, &b.dq})
    std::fill(std::begin(t->stride), std::end(t->stride), int64_t(0));
  ASSERT_TRUE(fa::forward(b.fwd).ok());
  ASSERT_TRUE(fa::backward(b).ok());
  for (const harness::HostTensor* t : {&e.dk, &e.dv})
    for (int64_t i = 0; i < t->numel(); ++i) ASSERT_EQ(t->get(i), 0.0);
}

// The backward of a problem without keys writes dq = 0 on every row; of one without queries, dk = dv = 0.
TEST(CpuAttentionEdge, BackwardWithoutKeysOrWithoutQueries) {
  std::mt19937_64 rng(13);
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{5, 0}, {0, 7}}) {
    CaseSpec s = make(sq, sk, 16, DType::kBFloat16);
    HostCase c(s, rng);
    ASSERT_TRUE(fa::forward(c.args()).ok());
    ASSERT_TRUE(fa::backward(c.backward_args()).ok());
    for (const harness::HostTensor* t : {&c.dq, &c.dk, &c.dv})
      for (int64_t i = 0; i < t->numel(); ++i) ASSERT_EQ(t->get(i), 0.0) << "sq " << sq << " sk " << sk;
  }
}

TEST(CpuAttentionEdge, BackwardIsBitwiseDeterministicAcrossRunsAndThreadCounts) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CaseSpec s = make(130, 150, 64, DType::kBFloat16, true);
  s.heads_q = 4;
  s.heads_kv = 1;
  HostCase c(s, rng);
  ASSERT_TRUE(fa::forward(c.args()).ok());
  std::vector<uint8_t> first;
  for (int run = 0; run < 10; ++run) {
    fa::BackwardArgs b = c.backward_args();
    b.fwd.deterministic = true;
    b.fwd.num_threads = 1 + run % 3;
    ASSERT_TRUE(fa::backward(b).ok());
    std::vector<uint8_t> bytes;
    for (const harness::HostTensor* t : {&c.dq, &c.dk, &c.dv})
      bytes.insert(bytes.end(), t->storage.begin(), t->storage.end());
    if (run == 0)
      first = bytes;
    else
      ASSERT_EQ(std::memcmp(first.data(), bytes.data(), first.size()), 0) << "run " << run << " differs";
    c.poison_outputs();
    ASSERT_TRUE(fa::forward(c.args()).ok());
  }
}

TEST(CpuAttentionEdge, ReportsTheKernelThatRan) {
  std::mt19937_64 rng(13);
  HostCase c(make(8, 8, 32, DType::kFloat32), rng);
  fa::RunInfo info;
  ASSERT_TRUE(fa::check_supported(c.args(), &info).ok());
  EXPECT_EQ(info.backend, fa::Backend::kCPU);
  EXPECT_EQ(info.algorithm, fa::Algorithm::kFA2);
  EXPECT_FALSE(info.kernel.empty());
  EXPECT_EQ(harness::count_nan(c.out), c.out.numel()) << "check_supported must not run anything";
}

// Case `spec` on inputs drawn from rng: the forward, then the backward from its outputs, each against the
// float64 reference; check_info(direction, info) looks at what ran ("fwd", "bwd").
template <typename CheckInfo>
void check_forward_then_backward(const CaseSpec& spec, std::mt19937_64& rng, CheckInfo check_info) {
  HostCase c(spec, rng);
  fa::RunInfo info;
  fa::Status s = fa::forward(c.args(), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  check_info("fwd", info);
  ASSERT_NO_FATAL_FAILURE(expect_forward_matches(c));
  s = fa::backward(c.backward_args(), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  check_info("bwd", info);
  ASSERT_NO_FATAL_FAILURE(expect_backward_matches(c));
}

// Every option at once, drawn at random (tests/common/random_case.h): any head dim up to 256, the three
// dtypes, varlen with empty sequences and tail rows, GQA/MQA, causal, windows, softcap, scales of either
// sign, strided and head-major tensors, LSE, deterministic mode. Forward, then the backward from its
// outputs, each against the float64 reference.
TEST(CpuAttentionRandom, CombinedOptionsMatchTheReference) {
  const uint64_t seed = fa::testing::announce_seed("cpu random cases");
  std::mt19937_64 rng(seed);
  fa::testing::RandomCaseRules rules;
  rules.head_dims = fa::testing::head_dims_up_to_256(1);
  rules.backward = true;
  for (int i = 0; i < 40; ++i) {
    const CaseSpec spec = fa::testing::random_case(rules, rng, i);
    SCOPED_TRACE(spec.name() + " (seed " + std::to_string(seed) + ")");
    const auto on_cpu = [](const std::string& dir, const fa::RunInfo& info) {
      if (dir == "fwd") EXPECT_EQ(info.backend, fa::Backend::kCPU);
    };
    ASSERT_NO_FATAL_FAILURE(check_forward_then_backward(spec, rng, on_cpu));
  }
}

// The same random combinations on the bf16 tile products (head dims that are multiples of 32, bf16 and
// fp16): the portable emulation of the AMX layout on any machine, and AMX itself where the CPU has it.
TEST(CpuAttentionRandom, CombinedOptionsOnTheTileProducts) {
  const uint64_t seed = fa::testing::announce_seed("cpu random cases, tile products");
  std::mt19937_64 rng(seed);
  fa::testing::RandomCaseRules rules;
  rules.dtypes = {DType::kBFloat16, DType::kFloat16};
  rules.head_dims = {32, 64, 96, 128, 160, 192, 224, 256};
  rules.backward = true;
  for (Bf16Products products : {Bf16Products::kEmulated, Bf16Products::kAmx}) {
    if (!fa::testing::bf16_products_runnable(products)) {
      std::cout << "  " << fa::detail::cpu::bf16_products_name(products) << ": not on this CPU, skipped\n";
      continue;
    }
    fa::testing::ScopedBf16Products scoped(products);
    for (int i = 0; i < 16; ++i) {
      const CaseSpec spec = fa::testing::random_case(rules, rng, i);
      SCOPED_TRACE(std::string(fa::detail::cpu::bf16_products_name(products)) + " " + spec.name() + " (seed " +
                   std::to_string(seed) + ")");
      const auto on_products = [&](const std::string& dir, const fa::RunInfo& info) {
        EXPECT_EQ(info.kernel, expected_kernel(dir, products));
      };
      ASSERT_NO_FATAL_FAILURE(check_forward_then_backward(spec, rng, on_products));
    }
  }
}

}  // namespace
