// The `standard` (materialized S and P through cuBLAS) and `fa1` (KV-outer loop order) CUDA algorithms
// against the float64 reference, forward and backward, with the tolerance rule of harness::judge.
//
// Each case draws fresh seeded inputs, poisons every output (so an unwritten element stays NaN and an
// element written outside the logical tensor shows up in the padding), and runs forward and backward.
// The backward reads out and LSE from the float64 reference forward, so it does not depend on either
// forward kernel.
#include <gtest/gtest.h>

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/attention_case.h"
#include "common/random_case.h"
#include "device_case.h"
#include "flashattn/attention.h"
#include "reference/harness.h"
#include "reference/reference.h"

namespace {

using flashattn::Algorithm;
using flashattn::AttentionArgs;
using flashattn::DType;
using flashattn::RunInfo;
using flashattn::Status;
using flashattn::StatusCode;
using flashattn::harness::HostTensor;
using flashattn::testing::DeviceTensor;
using flashattn::testing::expect_matches_reference;
using flashattn::testing::HostCase;
using flashattn::testing::kRowPadElems;
using flashattn::testing::Layout;
using Case = flashattn::testing::CaseSpec;
namespace harness = flashattn::harness;
namespace reference = flashattn::reference;

constexpr int64_t kOddPad = 3;  // rows padded by 3 elements start at odd element offsets
constexpr int64_t kVarlenTailRows = 3;  // packed rows after the last sequence: out 0, LSE -inf, gradients 0

// The defaults of this suite: bf16, batch 2, 2 heads, 64 x 64, d = 64.
Case base_case() {
  Case c;
  c.dtype = DType::kBFloat16;
  c.batch = 2;
  c.seqlen_q = c.seqlen_k = 64;
  c.head_dim = 64;
  c.varlen_tail_rows = kVarlenTailRows;
  return c;
}

const char* kernel_prefix(Algorithm a) { return a == Algorithm::kStandard ? "standard_" : "fa1_"; }

// The forward into poisoned out and LSE, then the backward from the float64 forward's out and LSE into
// poisoned gradients, each against the reference, on inputs drawn from `rng`.
void check_forward_and_backward(const Case& c, std::mt19937_64& rng) {
  HostCase h(c, rng);
  reference::Result ref, naive;
  ASSERT_TRUE(reference::backward(h.backward_args(), reference::Precision::kFloat64, &ref).ok());
  ASSERT_TRUE(reference::backward(h.backward_args(), reference::Precision::kNaive, &naive).ok());

  // Forward into poisoned out and LSE (on a copy: the backward below starts from the poisoned case).
  {
    HostCase fwd = h;
    RunInfo info;
    ASSERT_NO_FATAL_FAILURE(flashattn::testing::run_forward(&fwd, kernel_prefix(c.algorithm), &info));
    expect_matches_reference("out", fwd.out, ref.out, naive.out, c.dtype, &std::cout);
    expect_matches_reference("lse", fwd.lse, ref.lse, naive.lse, c.dtype, &std::cout);
  }

  // Backward from the float64 forward's out and LSE, into poisoned gradients.
  ASSERT_TRUE(h.set_forward_outputs(ref.out, ref.lse));
  ASSERT_NO_FATAL_FAILURE(
      flashattn::testing::expect_backward_matches_reference(&h, ref, naive, kernel_prefix(c.algorithm)));
}

class StandardFa1 : public ::testing::TestWithParam<Case> {};

TEST_P(StandardFa1, ForwardAndBackwardMatchFloat64Reference) {
  FA_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  std::mt19937_64 rng(flashattn::testing::announce_seed(c.label));
  check_forward_and_backward(c, rng);
}

// Every option at once, drawn at random (tests/common/random_case.h) for each algorithm: its head dims (any
// up to 128 for fa1, 256 for standard), fp16 and bf16, varlen with empty sequences and rows after the last
// one, GQA/MQA, causal, windows, softcap, scales of either sign, strided and head-major tensors.
TEST(StandardFa1Random, ForwardAndBackwardCombinedOptions) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = flashattn::testing::announce_seed("standard and fa1 random cases");
  std::mt19937_64 rng(seed);
  for (Algorithm algo : {Algorithm::kStandard, Algorithm::kFA1}) {
    flashattn::testing::RandomCaseRules rules;
    rules.dtypes = {DType::kFloat16, DType::kBFloat16};
    rules.head_dims = flashattn::testing::head_dims_up_to_256(1);
    if (algo == Algorithm::kFA1) rules.head_dims.resize(128);
    rules.backward = true;
    rules.algorithm = algo;
    for (int i = 0; i < 12; ++i) {
      const Case c = flashattn::testing::random_case(rules, rng, i);
      SCOPED_TRACE(std::string(kernel_prefix(algo)) + " " + c.name() + " (seed " + std::to_string(seed) + ")");
      std::cout << "  " << kernel_prefix(algo) << " " << c.name() << "\n";
      ASSERT_NO_FATAL_FAILURE(check_forward_and_backward(c, rng));
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Algorithm algo : {Algorithm::kStandard, Algorithm::kFA1}) {
    const std::string tag = algo == Algorithm::kStandard ? "standard" : "fa1";
    for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
      auto add = [&](Case c, const std::string& name) {
        c.algorithm = algo;
        c.dtype = dt;
        c.label = tag + "_" + (dt == DType::kFloat16 ? "fp16" : "bf16") + "_" + name;
        cases.push_back(std::move(c));
      };
      struct Len {
        int64_t q, k;
      };
      // {40, 0}: no key at all (out 0, lse -inf, dq 0); {0, 40}: no query at all (dk and dv 0).
      for (Len l : {Len{1, 1}, Len{17, 17}, Len{113, 113}, Len{113, 203}, Len{1, 239}, Len{799, 3}, Len{40, 0},
                    Len{0, 40}})
        for (bool causal : {false, true}) {
          Case c = base_case();
          c.seqlen_q = l.q;
          c.seqlen_k = l.k;
          c.causal = causal;
          add(c, "sq" + std::to_string(l.q) + "_sk" + std::to_string(l.k) + (causal ? "_causal" : ""));
        }
      {
        // Several KV and query tiles per (batch, head): the outer and inner loops both iterate.
        Case c = base_case();
        c.batch = 1;
        c.seqlen_q = 1007;
        c.seqlen_k = 1007;
        c.causal = true;
        add(c, "sq1007_causal");
      }
      {
        // seqlen_q > seqlen_k with the bottom-right causal mask: the first 200 rows see no key.
        Case c = base_case();
        c.seqlen_q = 300;
        c.seqlen_k = 100;
        c.causal = true;
        add(c, "causal_rows_without_keys");
      }
      {
        Case c = base_case();
        c.seqlen_q = 300;
        c.seqlen_k = 280;
        c.window_left = 37;
        c.window_right = 11;
        add(c, "window_37_11");
      }
      {
        // A large scale drives scores into the saturating part of tanh.
        Case c = base_case();
        c.seqlen_q = 150;
        c.seqlen_k = 170;
        c.softcap = 1.0f;
        c.scale = 0.5f;
        add(c, "softcap1_scale05");
      }
      {
        Case c = base_case();
        c.heads_q = 8;
        c.heads_kv = 1;
        c.seqlen_q = 257;
        c.seqlen_k = 300;
        c.causal = true;
        add(c, "gqa_8_1_causal");
      }
      for (bool causal : {false, true}) {
        Case c = base_case();
        c.heads_q = 4;
        c.heads_kv = 2;
        c.lens_q = {37, 0, 113, 64, 130};
        c.lens_k = {80, 50, 0, 64, 129};
        c.batch = 5;
        c.causal = causal;
        add(c, std::string("varlen_empty_seqs") + (causal ? "_causal" : ""));
      }
      struct Strided {
        Layout layout;
        int64_t pad;
        const char* name;
      };
      for (const Strided& st : {Strided{Layout::kPadded, kRowPadElems, "strided_padded_rows"},
                                Strided{Layout::kPadded, kOddPad, "strided_odd_padded_rows"},
                                Strided{Layout::kBatchHeadMajor, kRowPadElems, "strided_head_major_causal"}}) {
        Case c = base_case();
        c.seqlen_q = 140;
        c.seqlen_k = 77;
        c.layout = st.layout;
        c.pad = st.pad;
        c.causal = st.layout == Layout::kBatchHeadMajor;
        add(c, st.name);
      }
      {
        Case c = base_case();
        c.lens_q = {65, 0, 31};
        c.lens_k = {100, 7, 40};
        c.batch = 3;
        c.layout = Layout::kBatchHeadMajor;
        add(c, "varlen_strided");
      }
      // Head dims: fa1 rounds up to its 64 and 128 instances (100 is not a multiple of 8: scalar loads);
      // standard takes any head dim up to 256.
      const std::vector<int64_t> dims =
          algo == Algorithm::kStandard ? std::vector<int64_t>{40, 128, 256} : std::vector<int64_t>{32, 80, 100, 128};
      for (int64_t d : dims) {
        Case c = base_case();
        c.head_dim = d;
        c.seqlen_q = 113;
        c.seqlen_k = 203;
        c.causal = true;
        add(c, "hd" + std::to_string(d) + "_sq113_sk203_causal");
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, StandardFa1, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.label; });

// Device tensors of a forward call, with no values: for support checks only.
struct ShapeOnly {
  DeviceTensor q, k, v, out;
  ShapeOnly(DType dtype, int64_t seqlen, int64_t heads, int64_t head_dim) {
    HostTensor qh = HostTensor::make(dtype, {1, seqlen, heads, head_dim});
    harness::poison(&qh);
    for (DeviceTensor* t : {&q, &k, &v, &out}) t->upload(qh);
  }
  AttentionArgs args(Algorithm algo) const {
    AttentionArgs a;
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    a.out = out.view();
    a.backend = flashattn::Backend::kCUDA;
    a.algorithm = algo;
    return a;
  }
};

TEST(StandardSupport, RefusesScoresThatDoNotFitInDeviceMemory) {
  FA_SKIP_WITHOUT_GPU();
  // 64 heads x 65536^2 fp32 scores is about 1.1 TB; the inputs themselves are 67 MB each.
  constexpr int64_t kSeqlen = 65536, kHeads = 64, kHeadDim = 8;
  ShapeOnly t(DType::kBFloat16, kSeqlen, kHeads, kHeadDim);
  RunInfo info;
  const Status s = flashattn::check_supported(t.args(Algorithm::kStandard), &info);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("algorithm standard: S needs 1099.5 GB of device memory"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("GB free"), std::string::npos) << s.message();
  std::cout << "  " << s.message() << "\n";
  // fa1 keeps no score matrix: the same shape is accepted.
  const Status f = flashattn::check_supported(t.args(Algorithm::kFA1), &info);
  EXPECT_TRUE(f.ok()) << f.to_string();
}

TEST(Fa1Support, RefusesHeadDimAbove128AndStandardTakesIt) {
  FA_SKIP_WITHOUT_GPU();
  ShapeOnly t(DType::kFloat16, 16, 2, 256);
  RunInfo info;
  const Status s = flashattn::check_supported(t.args(Algorithm::kFA1), &info);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("algorithm fa1: head_dim 256 > 128"), std::string::npos) << s.message();
  const Status st = flashattn::check_supported(t.args(Algorithm::kStandard), &info);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(info.kernel, "standard_fwd_cublas_fp16");
}

}  // namespace
