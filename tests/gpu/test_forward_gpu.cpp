// The CUDA forward algorithms fa2 and fa3 against the float64 reference, one suite run for each: every
// head dim the algorithm builds, fp16 and bf16, odd and unequal lengths, causal and sliding-window
// masks (with rows that see no key), softcap, GQA/MQA, varlen with empty sequences, non-contiguous
// strides and LSE, on fresh seeded inputs with poisoned outputs (every element written, no byte of row
// padding touched). Long sequences are checked on sampled rows. Each algorithm also refuses, with a
// message, what it does not build.
//
// Test names: Algorithms/GpuForward.<Test>/fa2 and .../fa3 (filter one algorithm with '*/fa3').
// fa3 needs compute capability 9.0: on any other GPU its tests skip with a message.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/attention_case.h"
#include "common/random_case.h"
#include "core/numeric.h"
#include "device_case.h"
#include "flashattn/attention.h"
#include "forward_check.h"
#include "reference/harness.h"

namespace {

using flashattn::AttentionArgs;
using flashattn::DType;
using flashattn::RunInfo;
using flashattn::Status;
using flashattn::StatusCode;
using flashattn::harness::HostTensor;
using flashattn::testing::DeviceCase;
using flashattn::testing::ForwardAlgo;
using flashattn::testing::HostCase;
using flashattn::testing::Layout;
using Case = flashattn::testing::CaseSpec;
namespace harness = flashattn::harness;
namespace core = flashattn::core;
namespace fat = flashattn::testing;

constexpr DType kDtypes[] = {DType::kFloat16, DType::kBFloat16};

class GpuForward : public ::testing::TestWithParam<const ForwardAlgo*> {
 protected:
  void SetUp() override { FA_SKIP_UNLESS_DEVICE_RUNS(algo()); }

  const ForwardAlgo& algo() const { return *GetParam(); }
  Case make(std::string name, DType dtype, int64_t d, int64_t sq, int64_t sk) const {
    return fat::forward_case(algo(), std::move(name), dtype, d, sq, sk);
  }
  void check(const Case& c) const { fat::check_forward_case(c, algo().kernel_prefix); }
};

TEST_P(GpuForward, EveryHeadDimAndDtype) {
  for (DType dt : kDtypes)
    for (int64_t d : algo().head_dims)
      for (int64_t n : {1, 17, 113, 1007}) {
        Case c = make("square", dt, d, n, n);
        c.batch = n < 1000 ? 2 : 1;
        check(c);
      }
}

TEST_P(GpuForward, UnequalLengths) {
  const std::pair<int64_t, int64_t> pairs[] = {{113, 203}, {1023, 1024}, {1024, 1023}, {1, 239}, {799, 3}};
  for (auto [sq, sk] : pairs)
    for (bool causal : {false, true}) {
      Case c = make("unequal", DType::kBFloat16, 128, sq, sk);
      c.causal = causal;
      check(c);
      Case f = make("unequal", DType::kFloat16, 64, sq, sk);
      f.causal = causal;
      f.batch = 2;
      check(f);
    }
}

TEST_P(GpuForward, CausalWithRowsThatSeeNoKey) {
  // seqlen_q > seqlen_k: bottom-right alignment leaves the first seqlen_q - seqlen_k rows without keys.
  const std::pair<int64_t, int64_t> pairs[] = {{300, 50}, {257, 128}, {1007, 1007}, {64, 1}};
  for (auto [sq, sk] : pairs)
    for (int64_t d : {64, 128, 256}) {
      Case c = make("causal", DType::kBFloat16, d, sq, sk);
      c.causal = true;
      check(c);
    }
}

TEST_P(GpuForward, SlidingWindow) {
  struct W {
    int64_t left, right;
    bool causal;
  };
  const W windows[] = {{64, -1, true}, {100, 50, false}, {0, 0, false}, {37, -1, false}, {-1, 5, false},
                       {300, 0, false}};
  for (const W& w : windows)
    for (DType dt : kDtypes) {
      Case c = make("window", dt, dt == DType::kFloat16 ? algo().dim(96) : 128, 400, 517);
      c.window_left = w.left;
      c.window_right = w.right;
      c.causal = w.causal;
      check(c);
    }
  // A window that leaves rows without keys: seqlen_q > seqlen_k with a narrow right side.
  Case c = make("window-empty-rows", DType::kBFloat16, 64, 333, 100);
  c.window_left = 10;
  c.window_right = 0;
  check(c);
}

TEST_P(GpuForward, SoftcapAndScale) {
  for (DType dt : kDtypes)
    for (int64_t d : algo().dims({64, 192})) {
      Case c = make("softcap", dt, d, 213, 300);
      c.softcap = 5.0f;
      c.scale = 0.5f;  // large scores, so the cap matters
      check(c);
      c.causal = true;
      check(c);
    }
  // A negative scale flips which score is the row max: the kernel must scale before taking the max (fa2
  // folds a positive scale into the exponent at head dim 64, not at 128: both forms are covered).
  // An algorithm without it refuses the scale (RefusesWhatIsNotBuilt checks that).
  if (!algo().negative_scale) return;
  for (int64_t d : algo().dims({64, 128})) {
    Case n = make("negative-scale", DType::kBFloat16, d, 150, 150);
    n.scale = -0.2f;
    check(n);
  }
}

TEST_P(GpuForward, GqaAndMqa) {
  Case g = make("gqa8:1", DType::kBFloat16, 128, 301, 301);
  g.heads_q = 16;
  g.heads_kv = 2;
  check(g);
  g.causal = true;
  check(g);
  Case m = make("mqa", DType::kFloat16, 64, 129, 250);
  m.heads_q = 8;
  m.heads_kv = 1;
  check(m);
  m.dtype = DType::kBFloat16;
  m.head_dim = 256;
  m.causal = true;
  check(m);
}

TEST_P(GpuForward, VarlenWithEmptySequences) {
  Case c = make("varlen", DType::kBFloat16, 128, 0, 0);
  c.lens_q = {17, 0, 130, 64, 5};
  c.lens_k = {33, 12, 200, 0, 300};  // sequence 3 has queries but no keys: O = 0, lse = -inf
  c.heads_q = 4;
  c.heads_kv = 2;
  check(c);
  c.causal = true;
  check(c);
  c.dtype = DType::kFloat16;
  c.head_dim = 64;
  c.causal = false;
  c.window_left = 20;
  c.window_right = 3;
  c.layout = Layout::kHeadMajor;
  check(c);
}

// A problem without a single key: every row's out is 0 and its lse -inf. Padded (seqlen_k 0, with and without
// the causal mask) and varlen (every sequence without keys, and rows after the last sequence).
TEST_P(GpuForward, NoKeyAtAll) {
  for (int64_t d : algo().dims({64, 128, 256})) {
    Case c = make("no-keys", DType::kBFloat16, d, 37, 0);
    c.batch = 3;
    c.heads_q = 4;
    c.heads_kv = 2;
    check(c);
    c.causal = true;
    c.dtype = DType::kFloat16;
    check(c);
  }
  Case v = make("no-keys-varlen", DType::kBFloat16, 128, 0, 0);
  v.lens_q = {3, 0, 20};
  v.lens_k = {0, 0, 0};
  v.varlen_tail_rows = 2;
  check(v);
}

// Packed rows after the last sequence belong to no sequence: out 0 and lse -inf there, as for a row that sees
// no key (the tile kernels walk only the rows of sequences; the launch writes these).
TEST_P(GpuForward, VarlenRowsAfterTheLastSequence) {
  Case c = make("varlen-tail", DType::kBFloat16, 128, 0, 0);
  c.lens_q = {40, 0, 77};
  c.lens_k = {50, 9, 130};
  c.heads_q = 4;
  c.heads_kv = 2;
  c.varlen_tail_rows = 5;
  check(c);
  c.dtype = DType::kFloat16;
  c.head_dim = algo().dim(64);
  c.causal = true;
  c.layout = Layout::kHeadMajor;
  check(c);
  c.with_lse = false;
  check(c);
}

// Every option at once, drawn at random (tests/common/random_case.h) within what the algorithm builds: any
// multiple of 8 up to 256 where it pads head dims (its kernel sizes otherwise), fp16 and bf16, varlen with
// empty sequences and rows after the last one, GQA/MQA, causal, windows, softcap, scales (negative where it
// runs them), strided and head-major tensors, with and without LSE.
TEST_P(GpuForward, RandomCombinedOptions) {
  std::mt19937_64 draw(fat::next_forward_seed());
  fat::RandomCaseRules rules;
  rules.dtypes = {DType::kFloat16, DType::kBFloat16};
  rules.head_dims = algo().pads_head_dim ? fat::head_dims_up_to_256(8) : algo().head_dims;
  rules.negative_scale = algo().negative_scale;
  rules.algorithm = algo().algorithm;
  for (int i = 0; i < 32; ++i) check(fat::random_case(rules, draw, i));
}

TEST_P(GpuForward, NonContiguousStrides) {
  for (Layout layout : {Layout::kPadded, Layout::kHeadMajor})
    for (int64_t d : algo().dims({96, 128, 256})) {
      Case c = make("strided", DType::kBFloat16, d, 190, 211);
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.layout = layout;
      check(c);
    }
  Case c = make("strided-causal-fp16", DType::kFloat16, algo().dim(192), 255, 255);
  c.layout = Layout::kPadded;
  c.causal = true;
  check(c);
}

TEST_P(GpuForward, HeadDimsPaddedUpAndWithoutLse) {
  // Multiples of 8 that are not kernel sizes run on the next larger kernel with zero-filled columns (both
  // algorithms do that; other head dims are refused, see RefusesWhatIsNotBuilt).
  if (algo().pads_head_dim)
    for (int64_t d : {8, 40, 80, 136, 200, 248}) {
      Case c = make("padded-d", DType::kBFloat16, d, 97, 131);
      c.causal = d % 16 == 0;
      check(c);
    }
  Case c = make("no-lse", DType::kFloat16, 128, 200, 200);
  c.with_lse = false;
  check(c);
}

// The status check_supported gives for case `c` on the device (support checks only: no lse, so the
// arguments name just what the kernels read and write). `pad` > 0 pads q's rows by that many elements.
Status refusal(Case c, int64_t pad = 0) {
  c.with_lse = false;
  std::mt19937_64 rng(fat::next_forward_seed());
  HostCase h(c, rng);
  if (pad > 0) h.q = HostTensor::make(c.dtype, {c.batch, c.seqlen_q, c.heads_q, c.head_dim}, pad);
  return flashattn::check_supported(DeviceCase(h).forward_args());
}

void expect_refused(const Status& s, const std::string& text) {
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find(text), std::string::npos) << "'" << text << "' not in: " << s.message();
}

// Lengths whose sum leaves the kernels' 32-bit key bounds (core::MaskSpec32, seqlen_q + seqlen_k below
// 2^31 - 256) are refused, not wrapped; just below the limit this rule does not refuse. The check reads no
// data, so the views may claim more rows than their allocations hold.
Status refusal_at_lengths(Case c, int64_t seqlen_q, int64_t seqlen_k) {
  c.batch = 1;
  c.with_lse = false;
  std::mt19937_64 rng(fat::next_forward_seed());
  HostCase h(c, rng);
  DeviceCase d(h);
  AttentionArgs args = d.forward_args();
  for (flashattn::TensorView* t : {&args.q, &args.out, &args.k, &args.v}) {
    t->shape[1] = (t == &args.q || t == &args.out) ? seqlen_q : seqlen_k;
    t->stride[0] = t->stride[1] * t->shape[1];
  }
  return flashattn::check_supported(args);
}

void expect_length_limit(const Case& base, const std::string& algo_name) {
  const int64_t half = int64_t(1) << 30;
  expect_refused(refusal_at_lengths(base, half + 300, half), algo_name + ": seqlen_q + seqlen_k");
  const Status below = refusal_at_lengths(base, half - 200, half - 200);  // sum 2^31 - 400
  EXPECT_EQ(below.message().find("seqlen_q + seqlen_k"), std::string::npos) << below.to_string();
}

void fa2_refusals(const Case& base) {
  Case fp32 = base;
  fp32.dtype = DType::kFloat32;
  expect_refused(refusal(fp32), "dtype fp32 is not supported by algorithm fa2");
  Case odd = base;
  odd.head_dim = 65;
  expect_refused(refusal(odd), "multiple of 8");
  // Rows padded by 4 elements (8 bytes) break the 16-byte alignment cp.async needs.
  Case misaligned = base;
  misaligned.head_dim = 64;
  expect_refused(refusal(misaligned, 4), "16 bytes");
  expect_length_limit(base, "algorithm fa2");
}

// fa3 builds fp16/bf16 at head dims 64, 128, 256 (the multiples of 8 between on the next larger kernel) with a
// positive scale, forward only. Each refusal must name the algorithm, so that a user of `auto` learns why fa2
// ran instead.
void fa3_refusals(const Case& base) {
  Case fp32 = base;
  fp32.dtype = DType::kFloat32;
  expect_refused(refusal(fp32), "fa3");
  for (int64_t d : {65, 100}) {  // not multiples of 8
    Case c = base;
    c.head_dim = d;
    SCOPED_TRACE("head_dim " + std::to_string(d));
    expect_refused(refusal(c), "fa3");
  }
  Case negative = base;
  negative.scale = -0.2f;
  expect_refused(refusal(negative), "fa3");
  expect_length_limit(base, "algorithm fa3");

  Case bwd = base;
  bwd.with_backward = true;
  std::mt19937_64 rng(fat::next_forward_seed());
  HostCase h(bwd, rng);
  expect_refused(flashattn::check_supported(DeviceCase(h).backward_args()), "fa3");
}

TEST_P(GpuForward, RefusesWhatIsNotBuilt) {
  const Case base = make("refused", DType::kBFloat16, 128, 16, 16);
  if (algo().algorithm == flashattn::Algorithm::kFA2) fa2_refusals(base);
  if (algo().algorithm == flashattn::Algorithm::kFA3) fa3_refusals(base);

  Case ok = base;
  ok.with_lse = false;
  RunInfo info;
  std::mt19937_64 rng(fat::next_forward_seed());
  HostCase h(ok, rng);
  const Status s = flashattn::check_supported(DeviceCase(h).forward_args(), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(info.algorithm, algo().algorithm);
  if (algo().algorithm == flashattn::Algorithm::kFA2) EXPECT_EQ(info.kernel, "fa2_fwd_sm80_bf16_hd128_m128n64");
  fat::expect_kernel(info, algo().kernel_prefix);
}

TEST_P(GpuForward, LongSequencesOnSampledRows) {
  struct Long {
    DType dtype;
    int64_t seqlen, head_dim, heads_q, heads_kv;
    bool causal;
  };
  const Long cases[] = {{DType::kBFloat16, 8192, 128, 2, 1, false},
                        {DType::kFloat16, 8192, 256, 2, 2, true},
                        {DType::kBFloat16, 16384, 64, 4, 2, true},
                        {DType::kFloat16, 16384, 128, 2, 2, false}};
  constexpr int kSampleRows = 12;
  for (const Long& l : cases) {
    Case c = make("long", l.dtype, l.head_dim, l.seqlen, l.seqlen);
    c.heads_q = l.heads_q;
    c.heads_kv = l.heads_kv;
    c.causal = l.causal;
    const uint64_t seed = fat::next_forward_seed();
    SCOPED_TRACE(c.name() + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    HostCase h(c, rng);
    RunInfo info;
    ASSERT_NO_FATAL_FAILURE(fat::run_on_device(&h, fat::plain_forward(), algo().kernel_prefix, &info));
    ASSERT_NO_FATAL_FAILURE(fat::expect_sampled_rows_match(h, kSampleRows, rng, info.kernel));
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, GpuForward, ::testing::Values(&fat::fa2_algo(), &fat::fa3_algo()),
                         [](const ::testing::TestParamInfo<const ForwardAlgo*>& p) { return p.param->name; });

// Not a test: the speed of the fa2 forward at the shapes of the PyTorch SDPA peer measurements, for a
// quick look. Run with --gtest_also_run_disabled_tests.
TEST(Fa2ForwardSpeed, DISABLED_PrintTflops) {
  FA_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t batch, heads, seqlen, head_dim;
  };
  const Shape shapes[] = {{4, 16, 8192, 128}, {4, 32, 8192, 64}, {4, 8, 8192, 256}};
  constexpr int kWarmup = 3, kRuns = 20;
  for (const Shape& sh : shapes) {
    const int64_t numel = sh.batch * sh.seqlen * sh.heads * sh.head_dim;
    std::vector<uint16_t> host(static_cast<size_t>(numel));
    std::mt19937 rng(static_cast<uint32_t>(fat::next_forward_seed()));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto& x : host) x = core::float_to_bf16_bits(dist(rng));
    void* bufs[4] = {};
    for (void*& b : bufs) ASSERT_EQ(cudaMalloc(&b, size_t(numel) * 2), cudaSuccess);
    for (int i = 0; i < 3; ++i)
      ASSERT_EQ(cudaMemcpy(bufs[i], host.data(), size_t(numel) * 2, cudaMemcpyHostToDevice), cudaSuccess);
    const int64_t shape[4] = {sh.batch, sh.seqlen, sh.heads, sh.head_dim};
    AttentionArgs a;
    a.q = flashattn::TensorView::contiguous(bufs[0], DType::kBFloat16, 4, shape, flashattn::Device::kCUDA);
    a.k = flashattn::TensorView::contiguous(bufs[1], DType::kBFloat16, 4, shape, flashattn::Device::kCUDA);
    a.v = flashattn::TensorView::contiguous(bufs[2], DType::kBFloat16, 4, shape, flashattn::Device::kCUDA);
    a.out = flashattn::TensorView::contiguous(bufs[3], DType::kBFloat16, 4, shape, flashattn::Device::kCUDA);
    a.backend = flashattn::Backend::kCUDA;
    a.algorithm = flashattn::Algorithm::kFA2;
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    for (bool causal : {false, true}) {
      a.causal = causal;
      std::vector<float> ms;
      for (int i = 0; i < kWarmup + kRuns; ++i) {
        cudaEventRecord(start);
        Status s = flashattn::forward(a);
        cudaEventRecord(stop);
        ASSERT_TRUE(s.ok()) << s.to_string();
        cudaEventSynchronize(stop);
        float t = 0;
        cudaEventElapsedTime(&t, start, stop);
        if (i >= kWarmup) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const double median_ms = ms[ms.size() / 2];
      const double flops = 4.0 * double(sh.batch * sh.heads) * double(sh.seqlen) * double(sh.seqlen) *
                           double(sh.head_dim) * (causal ? 0.5 : 1.0);
      std::cout << "[fa2 forward speed] b" << sh.batch << " h" << sh.heads << " n" << sh.seqlen << " d"
                << sh.head_dim << (causal ? " causal    " : " non-causal") << " bf16: " << median_ms
                << " ms, " << flops / (median_ms * 1e-3) / 1e12 << " TFLOP/s\n";
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    for (void* b : bufs) cudaFree(b);
  }
}

}  // namespace
