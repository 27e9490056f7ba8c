// forward_fa3_ablation without a GPU: it validates exactly as forward() does, rejects variants and
// algorithms it does not know, refuses to run anywhere but on the cuda backend, and writes nothing when
// it refuses. (The variants themselves are checked on the GPU: tests/gpu/test_fa3_forward.cpp.)
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>

#include "common/attention_case.h"
#include "flashattn/attention.h"

namespace fa = flashattn;
using fa::Fa3Ablation;
using fa::testing::CaseSpec;
using fa::testing::HostCase;

namespace {

CaseSpec spec(fa::DType dtype = fa::DType::kBFloat16) {
  CaseSpec s;
  s.batch = 2;
  s.seqlen_q = 9;
  s.seqlen_k = 11;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 64;
  s.dtype = dtype;
  s.with_backward = false;
  return s;
}

void expect_untouched(const HostCase& c) {
  EXPECT_EQ(fa::harness::count_nan(c.out), c.out.numel()) << "out was written despite the refusal";
  EXPECT_EQ(fa::harness::count_nan(c.lse), c.lse.numel()) << "lse was written despite the refusal";
}

void expect_status(const fa::Status& s, fa::StatusCode code, const std::string& part) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(part), std::string::npos) << "'" << part << "' not in: " << s.message();
}

TEST(Fa3AblationApi, HostTensorsAreNotSupported) {
  std::mt19937_64 rng(1);
  for (fa::DType dtype : {fa::DType::kFloat32, fa::DType::kFloat16, fa::DType::kBFloat16}) {
    HostCase c(spec(dtype), rng);
    fa::RunInfo info;
    expect_status(fa::forward_fa3_ablation(c.args(), Fa3Ablation::kFull, &info), fa::StatusCode::kNotSupported,
                  "forward_fa3_ablation: runs on the cuda backend only; this call would run on backend cpu "
                  "(tensors in cpu memory)");
    expect_untouched(c);
    // forward() itself takes the same call on the cpu backend: the refusal is the entry point's alone.
    EXPECT_TRUE(fa::forward(c.args()).ok());
  }
}

TEST(Fa3AblationApi, ExplicitCpuBackendIsNotSupported) {
  std::mt19937_64 rng(2);
  HostCase c(spec(), rng);
  fa::AttentionArgs a = c.args();
  a.backend = fa::Backend::kCPU;
  expect_status(fa::forward_fa3_ablation(a, Fa3Ablation::kNoPingPong), fa::StatusCode::kNotSupported,
                "runs on the cuda backend only");
  expect_untouched(c);
}

TEST(Fa3AblationApi, ValidatesAsForwardDoes) {
  struct Broken {
    const char* name;
    void (*apply)(fa::AttentionArgs*);
  };
  const Broken cases[] = {
      {"k head_dim differs", [](fa::AttentionArgs* a) { a->k.shape[3] = 32; }},
      {"v absent", [](fa::AttentionArgs* a) { a->v = fa::TensorView{}; }},
      {"lse shape", [](fa::AttentionArgs* a) { a->lse.shape[2] += 1; }},
      {"NaN scale", [](fa::AttentionArgs* a) { a->softmax_scale = std::numeric_limits<float>::quiet_NaN(); }},
      {"negative softcap", [](fa::AttentionArgs* a) { a->softcap = -1.0f; }},
      {"backend cuda on host tensors", [](fa::AttentionArgs* a) { a->backend = fa::Backend::kCUDA; }},
  };
  std::mt19937_64 rng(3);
  for (const Broken& b : cases) {
    SCOPED_TRACE(b.name);
    HostCase c(spec(), rng);
    fa::AttentionArgs a = c.args();
    b.apply(&a);
    const fa::Status expected = fa::forward(a);
    ASSERT_FALSE(expected.ok()) << "the broken call must be refused by forward() too";
    for (Fa3Ablation v : {Fa3Ablation::kFull, Fa3Ablation::kNoIntraWarpgroupOverlap}) {
      const fa::Status s = fa::forward_fa3_ablation(a, v);
      EXPECT_EQ(s.code(), expected.code()) << s.to_string() << " vs forward: " << expected.to_string();
      EXPECT_EQ(s.message(), expected.message());
    }
    expect_untouched(c);
  }
}

TEST(Fa3AblationApi, RejectsUnknownVariantsAndOtherAlgorithms) {
  std::mt19937_64 rng(4);
  HostCase c(spec(), rng);
  constexpr int kNotAVariant = 7;
  expect_status(fa::forward_fa3_ablation(c.args(), static_cast<Fa3Ablation>(kNotAVariant)),
                fa::StatusCode::kInvalidArgument, "variant: 7 is not a Fa3Ablation value");
  for (fa::Algorithm algo : {fa::Algorithm::kStandard, fa::Algorithm::kFA1, fa::Algorithm::kFA2}) {
    fa::AttentionArgs a = c.args();
    a.algorithm = algo;
    expect_status(fa::forward_fa3_ablation(a, Fa3Ablation::kFull), fa::StatusCode::kInvalidArgument,
                  std::string("algorithm: forward_fa3_ablation runs fa3 (or auto), not ") + fa::to_string(algo));
  }
  // algorithm fa3 (and auto) pass this rule and reach the next one: host tensors.
  fa::AttentionArgs a = c.args();
  a.algorithm = fa::Algorithm::kFA3;
  expect_status(fa::forward_fa3_ablation(a, Fa3Ablation::kFull), fa::StatusCode::kNotSupported,
                "runs on the cuda backend only");
  expect_untouched(c);
}

TEST(Fa3AblationApi, DeviceTensorsWithoutCudaBuildAreNotSupported) {
  if (fa::cuda_built()) GTEST_SKIP() << "this build has CUDA: device tensors are checked by the GPU suite";
  std::mt19937_64 rng(5);
  HostCase c(spec(), rng);
  fa::AttentionArgs a = c.args();
  for (fa::TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) t->device = fa::Device::kCUDA;
  expect_status(fa::forward_fa3_ablation(a, Fa3Ablation::kFull), fa::StatusCode::kNotSupported,
                "no CUDA backend");
  expect_untouched(c);
}

TEST(Fa3AblationApi, VariantNames) {
  EXPECT_STREQ(fa::to_string(Fa3Ablation::kFull), "full");
  EXPECT_STREQ(fa::to_string(Fa3Ablation::kNoWarpSpecialization), "no_warp_specialization");
  EXPECT_STREQ(fa::to_string(Fa3Ablation::kNoPingPong), "no_ping_pong");
  EXPECT_STREQ(fa::to_string(Fa3Ablation::kNoIntraWarpgroupOverlap), "no_intra_warpgroup_overlap");
}

}  // namespace
