// One test per validation rule: the call returns the right code with a message naming the argument,
// and writes nothing (every output stays poisoned).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "common/attention_case.h"
#include "flashattn/flashattn_c.h"

namespace fa = flashattn;
using fa::testing::CaseSpec;
using fa::testing::HostCase;

namespace {

CaseSpec base_spec() {
  CaseSpec s;
  s.batch = 2;
  s.seqlen_q = 9;
  s.seqlen_k = 11;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 16;
  return s;
}

CaseSpec varlen_spec() {
  CaseSpec s = base_spec();
  s.lens_q = {3, 0, 6};
  s.lens_k = {5, 2, 4};
  return s;
}

struct Rule {
  const char* name;
  fa::StatusCode code;
  const char* message_part;  // the message must contain this (it names the argument and the rule)
  std::function<void(HostCase&, fa::BackwardArgs&)> breaks;
  bool backward = false;
  CaseSpec spec = base_spec();
};

void expect_untouched(const HostCase& c) {
  for (const fa::harness::HostTensor* t : {&c.out, &c.lse, &c.dq, &c.dk, &c.dv})
    EXPECT_EQ(fa::harness::count_nan(*t), t->numel()) << "an output was written despite the error";
}

void run_rule(const Rule& r) {
  SCOPED_TRACE(r.name);
  std::mt19937_64 rng(42);
  HostCase c(r.spec, rng);
  fa::BackwardArgs b = c.backward_args();
  r.breaks(c, b);
  fa::Status s = r.backward ? fa::backward(b) : fa::forward(b.fwd);
  EXPECT_EQ(s.code(), r.code) << s.to_string();
  EXPECT_NE(s.message().find(r.message_part), std::string::npos)
      << "message \"" << s.message() << "\" lacks \"" << r.message_part << "\"";
  expect_untouched(c);
  // check_supported agrees with the call and also writes nothing.
  fa::Status s2 = r.backward ? fa::check_supported(b) : fa::check_supported(b.fwd);
  EXPECT_EQ(s2.code(), r.code);
  expect_untouched(c);
}

using Code = fa::StatusCode;
constexpr Code kInvalid = Code::kInvalidArgument;
constexpr Code kUnsupported = Code::kNotSupported;

}  // namespace

TEST(Validation, EveryRuleNamesItsArgumentAndWritesNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Rule> rules = {
      {"q absent", kInvalid, "q: is required", [](HostCase&, fa::BackwardArgs& b) { b.fwd.q.data = nullptr; }},
      {"out absent", kInvalid, "out: is required", [](HostCase&, fa::BackwardArgs& b) { b.fwd.out.data = nullptr; }},
      {"q ndim", kInvalid, "q: expected 4 dimensions", [](HostCase&, fa::BackwardArgs& b) { b.fwd.q.ndim = 3; }},
      {"negative size", kInvalid, "k: dimension 1 has negative size",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.k.shape[1] = -1; }},
      {"negative stride", kInvalid, "v: dimension 0 has negative stride",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.v.stride[0] = -5; }},
      {"last dim not contiguous", kInvalid, "q: the last dimension must be contiguous",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.q.stride[3] = 2; }},
      {"dtype mismatch", kInvalid, "k: dtype fp16 must equal the dtype of q",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.k.dtype = fa::DType::kFloat16; }},
      {"int32 q", kInvalid, "q: dtype int32",
       [](HostCase&, fa::BackwardArgs& b) {
         for (fa::TensorView* t : {&b.fwd.q, &b.fwd.k, &b.fwd.v, &b.fwd.out}) t->dtype = fa::DType::kInt32;
       }},
      {"v shape", kInvalid, "v: shape", [](HostCase&, fa::BackwardArgs& b) { b.fwd.v.shape[1] = 10; }},
      {"out shape", kInvalid, "out: shape", [](HostCase&, fa::BackwardArgs& b) { b.fwd.out.shape[2] = 3; }},
      {"head_dim mismatch", kInvalid, "k: head_dim 8 must equal the head_dim of q",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.k.shape[3] = b.fwd.v.shape[3] = 8; }},
      {"head_dim zero", kInvalid, "q: head_dim must be positive",
       [](HostCase&, fa::BackwardArgs& b) {
         for (fa::TensorView* t : {&b.fwd.q, &b.fwd.k, &b.fwd.v, &b.fwd.out}) t->shape[3] = 0;
       }},
      {"heads not a multiple", kInvalid, "must be a multiple of heads_kv",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.k.shape[2] = b.fwd.v.shape[2] = 3; }},
      {"batch mismatch", kInvalid, "k: batch 1 must equal the batch of q",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.k.shape[0] = b.fwd.v.shape[0] = 1; }},
      {"misaligned pointer", kInvalid, "q: data pointer is not aligned",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.q.data = static_cast<char*>(b.fwd.q.data) + 1; }},
      {"lse dtype", kInvalid, "lse: dtype must be float32",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.lse.dtype = fa::DType::kFloat16; }},
      {"lse shape", kInvalid, "lse: shape", [](HostCase&, fa::BackwardArgs& b) { b.fwd.lse.shape[2] = 10; }},
      {"lse not contiguous", kInvalid, "lse: must be contiguous",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.lse.stride[1] = 100; }},
      {"scale not finite", kInvalid, "softmax_scale: must be finite",
       [nan](HostCase&, fa::BackwardArgs& b) { b.fwd.softmax_scale = nan; }},
      {"softcap negative", kInvalid, "softcap: must be finite and >= 0",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.softcap = -1.0f; }},
      {"window left", kInvalid, "window_left: must be >= 0, or -1",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.window_left = -2; }},
      {"window right", kInvalid, "window_right: must be >= 0, or -1",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.window_right = -7; }},
      {"threads", kInvalid, "num_threads: must be >= 0",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.num_threads = -1; }},
      {"unknown backend", kInvalid, "backend: unknown backend code",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.backend = static_cast<fa::Backend>(9); }},
      {"unknown algorithm", kInvalid, "algorithm: unknown algorithm code",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.algorithm = static_cast<fa::Algorithm>(42); }},
      {"backend vs memory", kInvalid, "backend: cuda cannot run on tensors in cpu memory",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.backend = fa::Backend::kCUDA; }},
      {"cpu head_dim limit", kUnsupported, "head_dim 272 > 256 is not supported by backend cpu", nullptr},
      {"cpu fp8", kUnsupported, "fp8_e4m3 is not supported by backend cpu",
       [](HostCase&, fa::BackwardArgs& b) {
         for (fa::TensorView* t : {&b.fwd.q, &b.fwd.k, &b.fwd.v, &b.fwd.out}) t->dtype = fa::DType::kFloat8E4M3;
       }},
      {"cpu algorithm", kUnsupported, "fa3", [](HostCase&, fa::BackwardArgs& b) { b.fwd.algorithm = fa::Algorithm::kFA3; }},
  };
  // head_dim 272: a valid call that the CPU backend does not handle.
  rules[26].spec.head_dim = 272;
  rules[26].breaks = [](HostCase&, fa::BackwardArgs&) {};
  for (const Rule& r : rules) run_rule(r);
}

TEST(Validation, VarlenRules) {
  std::vector<Rule> rules = {
      {"cu_seqlens_k absent", kInvalid, "cu_seqlens_k: is required for varlen",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.cu_seqlens_k.data = nullptr; }},
      {"cu dtype", kInvalid, "cu_seqlens_q: dtype must be int32",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.cu_seqlens_q.dtype = fa::DType::kFloat32; }},
      {"cu first entry", kInvalid, "cu_seqlens_q[0] must be 0", [](HostCase& c, fa::BackwardArgs&) { c.cu_q.set(0, 1); }},
      {"cu decreasing", kInvalid, "cu_seqlens_k must be non-decreasing",
       [](HostCase& c, fa::BackwardArgs&) { c.cu_k.set(2, 1); }},
      {"cu past the end", kInvalid, "cu_seqlens_q: last entry 12 exceeds the 9 packed rows",
       [](HostCase& c, fa::BackwardArgs&) { c.cu_q.set(3, 12); }},
      {"cu sizes differ", kInvalid, "cu_seqlens_k: has 3 entries",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.cu_seqlens_k.shape[0] = 3; }},
      {"max_seqlen too small", kInvalid, "a sequence has length 6 > the given max_seqlen 4",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.max_seqlen_q = 4; }},
      {"varlen ndim", kInvalid, "q: expected 3 dimensions", [](HostCase&, fa::BackwardArgs& b) { b.fwd.q.ndim = 4; }},
      {"varlen lse shape", kInvalid, "[heads_q, total_q] for varlen",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.lse.shape[1] = 8; }},
  };
  for (Rule& r : rules) {
    r.spec = varlen_spec();
    run_rule(r);
  }
}

TEST(Validation, BackwardRules) {
  std::vector<Rule> rules = {
      {"lse absent", kInvalid, "lse: the forward LSE is required by backward",
       [](HostCase&, fa::BackwardArgs& b) { b.fwd.lse.data = nullptr; }, true},
      {"dout absent", kInvalid, "dout: is required", [](HostCase&, fa::BackwardArgs& b) { b.dout.data = nullptr; }, true},
      {"dq shape", kInvalid, "dq: shape", [](HostCase&, fa::BackwardArgs& b) { b.dq.shape[1] = 3; }, true},
      {"dk dtype", kInvalid, "dk: dtype bf16 must equal the dtype of q",
       [](HostCase&, fa::BackwardArgs& b) { b.dk.dtype = fa::DType::kBFloat16; }, true},
      {"dv not contiguous in last dim", kInvalid, "dv: the last dimension must be contiguous",
       [](HostCase&, fa::BackwardArgs& b) { b.dv.stride[3] = 3; }, true},
  };
  for (const Rule& r : rules) run_rule(r);
}

TEST(Validation, CudaMemoryWithoutUsableCudaIsRefused) {
  std::mt19937_64 rng(1);
  HostCase c(base_spec(), rng);
  fa::AttentionArgs a = c.args();
  for (fa::TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) t->device = fa::Device::kCUDA;
  fa::Status s = fa::forward(a);
  EXPECT_FALSE(s.ok());
  // Without CUDA in the build: not supported; with CUDA: these host pointers are not device memory.
  EXPECT_NE(s.message().find("q:"), std::string::npos) << s.to_string();
  expect_untouched(c);
}

TEST(Validation, CApiReportsTheSameErrors) {
  std::mt19937_64 rng(3);
  HostCase c(base_spec(), rng);
  flashattn_attention_args a;
  flashattn_attention_args_init(&a);
  EXPECT_EQ(flashattn_forward(&a), FLASHATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("q: is required"), std::string::npos);
  EXPECT_EQ(flashattn_forward(nullptr), FLASHATTN_INVALID_ARGUMENT);
  EXPECT_STRNE(flashattn_version(), "");
}
