// The `standard` (materialized S and P through cuBLAS) and `fa1` (KV-outer loop order) CUDA algorithms
// against the float64 reference, forward and backward, with the tolerance rule of harness::judge.
//
// Each case draws fresh seeded inputs, poisons every output (so an unwritten element stays NaN and an
// element written outside the logical tensor shows up in the padding), and runs forward and backward.
// The backward reads out and LSE from the float64 reference forward, so it does not depend on either
// forward kernel.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "device_tensor.h"
#include "flashattn/attention.h"
#include "reference/harness.h"
#include "reference/reference.h"

namespace {

using flashattn::Algorithm;
using flashattn::AttentionArgs;
using flashattn::BackwardArgs;
using flashattn::DType;
using flashattn::RunInfo;
using flashattn::Status;
using flashattn::StatusCode;
using flashattn::harness::HostTensor;
using flashattn::testing::DeviceTensor;
namespace harness = flashattn::harness;
namespace reference = flashattn::reference;

enum class Layout {
  kContiguous,
  kPadded,     // rows padded by kAlignedPad elements: non-contiguous, still 16-byte aligned
  kOddPadded,  // rows padded by kOddPad elements: rows start at odd element offsets
  kHeadMajor,  // [batch, heads, seqlen, d] memory viewed as [batch, seqlen, heads, d]
};
constexpr int64_t kAlignedPad = 8;
constexpr int64_t kOddPad = 3;
constexpr int64_t kVarlenTailRows = 3;  // packed rows after the last sequence: out 0, LSE -inf, gradients 0

struct Case {
  std::string name;
  Algorithm algo = Algorithm::kStandard;
  DType dtype = DType::kBFloat16;
  int64_t batch = 2, heads_q = 2, heads_kv = 2, seqlen_q = 64, seqlen_k = 64, head_dim = 64;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  float scale = 0.0f;
  std::vector<int64_t> lens_q, lens_k;  // varlen when non-empty
  Layout layout = Layout::kContiguous;

  bool varlen() const { return !lens_q.empty(); }
};

HostTensor make_tensor(DType dtype, std::vector<int64_t> shape, Layout layout) {
  switch (layout) {
    case Layout::kContiguous: return HostTensor::make(dtype, shape);
    case Layout::kPadded: return HostTensor::make(dtype, shape, kAlignedPad);
    case Layout::kOddPadded: return HostTensor::make(dtype, shape, kOddPad);
    case Layout::kHeadMajor: break;
  }
  if (shape.size() != 4) return HostTensor::make(dtype, shape, kAlignedPad);
  HostTensor t = HostTensor::make(dtype, {shape[0], shape[2], shape[1], shape[3]});
  std::swap(t.view.shape[1], t.view.shape[2]);
  std::swap(t.view.stride[1], t.view.stride[2]);
  return t;
}

struct HostProblem {
  Case c;
  HostTensor q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k;

  HostProblem(const Case& cs, std::mt19937_64& rng) : c(cs) {
    std::vector<int64_t> qs, ks, ls;
    if (c.varlen()) {
      cu_q = HostTensor::make(DType::kInt32, {int64_t(c.lens_q.size()) + 1});
      cu_k = HostTensor::make(DType::kInt32, {int64_t(c.lens_k.size()) + 1});
      int64_t tq = 0, tk = 0;
      cu_q.set(0, 0);
      cu_k.set(0, 0);
      for (size_t i = 0; i < c.lens_q.size(); ++i) {
        tq += c.lens_q[i];
        tk += c.lens_k[i];
        cu_q.set(int64_t(i) + 1, double(tq));
        cu_k.set(int64_t(i) + 1, double(tk));
      }
      tq += kVarlenTailRows;
      tk += kVarlenTailRows;
      qs = {tq, c.heads_q, c.head_dim};
      ks = {tk, c.heads_kv, c.head_dim};
      ls = {c.heads_q, tq};
    } else {
      qs = {c.batch, c.seqlen_q, c.heads_q, c.head_dim};
      ks = {c.batch, c.seqlen_k, c.heads_kv, c.head_dim};
      ls = {c.batch, c.heads_q, c.seqlen_q};
    }
    // Each tensor brings its own strides.
    const Layout other = c.layout == Layout::kContiguous ? Layout::kContiguous : Layout::kPadded;
    q = make_tensor(c.dtype, qs, c.layout);
    k = make_tensor(c.dtype, ks, other);
    v = make_tensor(c.dtype, ks, c.layout);
    out = make_tensor(c.dtype, qs, other);
    dout = make_tensor(c.dtype, qs, c.layout);
    dq = make_tensor(c.dtype, qs, other);
    dk = make_tensor(c.dtype, ks, c.layout);
    dv = make_tensor(c.dtype, ks, other);
    lse = HostTensor::make(DType::kFloat32, ls);
    for (HostTensor* t : {&q, &k, &v, &dout}) harness::fill_uniform(t, rng);
    for (HostTensor* t : {&out, &lse, &dq, &dk, &dv}) harness::poison(t);
  }

  AttentionArgs forward_args() const {
    AttentionArgs a;
    a.q = q.view;
    a.k = k.view;
    a.v = v.view;
    a.out = out.view;
    a.lse = lse.view;
    if (c.varlen()) {
      a.cu_seqlens_q = cu_q.view;
      a.cu_seqlens_k = cu_k.view;
    }
    a.softmax_scale = c.scale;
    a.causal = c.causal;
    a.window_left = c.window_left;
    a.window_right = c.window_right;
    a.softcap = c.softcap;
    return a;
  }
  BackwardArgs backward_args() const {
    BackwardArgs b;
    b.fwd = forward_args();
    b.dout = dout.view;
    b.dq = dq.view;
    b.dk = dk.view;
    b.dv = dv.view;
    return b;
  }
};

// The host tensors mirrored on the device; args() points a BackwardArgs at them with backend and algorithm set.
struct DeviceProblem {
  DeviceTensor q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k;

  explicit DeviceProblem(const HostProblem& h) {
    for (auto [dst, src] : {std::pair{&q, &h.q}, {&k, &h.k}, {&v, &h.v}, {&out, &h.out}, {&lse, &h.lse},
                            {&dout, &h.dout}, {&dq, &h.dq}, {&dk, &h.dk}, {&dv, &h.dv}})
      dst->upload(*src);
    if (h.c.varlen()) {
      cu_q.upload(h.cu_q);
      cu_k.upload(h.cu_k);
    }
  }

  BackwardArgs args(const Case& c) const {
    BackwardArgs b;
    AttentionArgs& a = b.fwd;
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    a.out = out.view();
    a.lse = lse.view();
    if (c.varlen()) {
      a.cu_seqlens_q = cu_q.view();
      a.cu_seqlens_k = cu_k.view();
    }
    a.softmax_scale = c.scale;
    a.causal = c.causal;
    a.window_left = c.window_left;
    a.window_right = c.window_right;
    a.softcap = c.softcap;
    a.backend = flashattn::Backend::kCUDA;
    a.algorithm = c.algo;
    b.dout = dout.view();
    b.dq = dq.view();
    b.dk = dk.view();
    b.dv = dv.view();
    return b;
  }
};

// Storage elements outside the logical tensor (row padding, gaps of a permuted view) that lost the poison.
int64_t touched_padding(const HostTensor& t) {
  const int64_t elem = flashattn::dtype_size(t.view.dtype);
  const int64_t slots = int64_t(t.storage.size()) / elem;
  std::vector<bool> logical(size_t(slots), false);
  for (int64_t linear = 0; linear < t.numel(); ++linear) {
    int64_t off = 0, rest = linear;
    for (int i = t.view.ndim - 1; i >= 0; --i) {
      off += (rest % t.view.shape[i]) * t.view.stride[i];
      rest /= t.view.shape[i];
    }
    logical[size_t(off)] = true;
  }
  HostTensor fresh = t;
  harness::poison(&fresh);
  int64_t touched = 0;
  for (int64_t s = 0; s < slots; ++s)
    if (!logical[size_t(s)] &&
        std::memcmp(&t.storage[size_t(s * elem)], &fresh.storage[size_t(s * elem)], size_t(elem)) != 0)
      ++touched;
  return touched;
}

void check_output(const char* name, const HostTensor& got, const std::vector<double>& ref,
                  const std::vector<double>& naive, DType dtype) {
  EXPECT_EQ(harness::count_nan(got), 0) << name << ": elements left unwritten (still NaN)";
  EXPECT_EQ(touched_padding(got), 0) << name << ": padding between rows was overwritten";
  const harness::Verdict v =
      harness::judge(harness::max_abs_diff(got, ref), harness::max_abs_diff(naive, ref), dtype, harness::max_abs(ref));
  EXPECT_TRUE(v.pass) << name << ": " << v.describe();
  std::cout << "  " << name << " " << v.describe() << "\n";
}

const char* kernel_prefix(Algorithm a) { return a == Algorithm::kStandard ? "standard_" : "fa1_"; }

class StandardFa1 : public ::testing::TestWithParam<Case> {};

TEST_P(StandardFa1, ForwardAndBackwardMatchFloat64Reference) {
  FA_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const uint64_t seed = harness::pick_seed();
  std::cout << "[" << c.name << "] seed " << seed << " (FLASHATTN_SEED to repeat)\n";
  std::mt19937_64 rng(seed);
  HostProblem h(c, rng);
  reference::Result ref, naive;
  ASSERT_TRUE(reference::backward(h.backward_args(), reference::Precision::kFloat64, &ref).ok());
  ASSERT_TRUE(reference::backward(h.backward_args(), reference::Precision::kNaive, &naive).ok());

  // Forward into poisoned out and LSE.
  {
    DeviceProblem d(h);
    RunInfo info;
    const Status s = flashattn::forward(d.args(c).fwd, &info);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(info.kernel.rfind(kernel_prefix(c.algo), 0), 0u) << info.kernel;
    HostTensor out = h.out, lse = h.lse;
    d.out.download(&out);
    d.lse.download(&lse);
    check_output("out", out, ref.out, naive.out, c.dtype);
    check_output("lse", lse, ref.lse, naive.lse, c.dtype);
  }

  // Backward from the float64 forward's out and LSE, into poisoned gradients.
  for (int64_t i = 0; i < h.out.numel(); ++i) h.out.set(i, ref.out[size_t(i)]);
  for (int64_t i = 0; i < h.lse.numel(); ++i) h.lse.set(i, ref.lse[size_t(i)]);
  DeviceProblem d(h);
  RunInfo info;
  const Status s = flashattn::backward(d.args(c), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(info.kernel.rfind(kernel_prefix(c.algo), 0), 0u) << info.kernel;
  d.dq.download(&h.dq);
  d.dk.download(&h.dk);
  d.dv.download(&h.dv);
  check_output("dq", h.dq, ref.dq, naive.dq, c.dtype);
  check_output("dk", h.dk, ref.dk, naive.dk, c.dtype);
  check_output("dv", h.dv, ref.dv, naive.dv, c.dtype);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Algorithm algo : {Algorithm::kStandard, Algorithm::kFA1}) {
    const std::string tag = algo == Algorithm::kStandard ? "standard" : "fa1";
    for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
      auto add = [&](Case c, const std::string& name) {
        c.algo = algo;
        c.dtype = dt;
        c.name = tag + "_" + (dt == DType::kFloat16 ? "fp16" : "bf16") + "_" + name;
        cases.push_back(std::move(c));
      };
      struct Len {
        int64_t q, k;
      };
      for (Len l : {Len{1, 1}, Len{17, 17}, Len{113, 113}, Len{113, 203}, Len{1, 239}, Len{799, 3}})
        for (bool causal : {false, true}) {
          Case c;
          c.seqlen_q = l.q;
          c.seqlen_k = l.k;
          c.causal = causal;
          add(c, "sq" + std::to_string(l.q) + "_sk" + std::to_string(l.k) + (causal ? "_causal" : ""));
        }
      {
        // Several KV and query tiles per (batch, head): the outer and inner loops both iterate.
        Case c;
        c.batch = 1;
        c.seqlen_q = 1007;
        c.seqlen_k = 1007;
        c.causal = true;
        add(c, "sq1007_causal");
      }
      {
        // seqlen_q > seqlen_k with the bottom-right causal mask: the first 200 rows see no key.
        Case c;
        c.seqlen_q = 300;
        c.seqlen_k = 100;
        c.causal = true;
        add(c, "causal_rows_without_keys");
      }
      {
        Case c;
        c.seqlen_q = 300;
        c.seqlen_k = 280;
        c.window_left = 37;
        c.window_right = 11;
        add(c, "window_37_11");
      }
      {
        // A large scale drives scores into the saturating part of tanh.
        Case c;
        c.seqlen_q = 150;
        c.seqlen_k = 170;
        c.softcap = 1.0f;
        c.scale = 0.5f;
        add(c, "softcap1_scale05");
      }
      {
        Case c;
        c.heads_q = 8;
        c.heads_kv = 1;
        c.seqlen_q = 257;
        c.seqlen_k = 300;
        c.causal = true;
        add(c, "gqa_8_1_causal");
      }
      for (bool causal : {false, true}) {
        Case c;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.lens_q = {37, 0, 113, 64, 130};
        c.lens_k = {80, 50, 0, 64, 129};
        c.batch = 5;
        c.causal = causal;
        add(c, std::string("varlen_empty_seqs") + (causal ? "_causal" : ""));
      }
      for (Layout layout : {Layout::kPadded, Layout::kOddPadded, Layout::kHeadMajor}) {
        Case c;
        c.seqlen_q = 140;
        c.seqlen_k = 77;
        c.layout = layout;
        c.causal = layout == Layout::kHeadMajor;
        add(c, layout == Layout::kPadded      ? "strided_padded_rows"
               : layout == Layout::kOddPadded ? "strided_odd_padded_rows"
                                              : "strided_head_major_causal");
      }
      {
        Case c;
        c.lens_q = {65, 0, 31};
        c.lens_k = {100, 7, 40};
        c.batch = 3;
        c.layout = Layout::kHeadMajor;
        add(c, "varlen_strided");
      }
      // Head dims: fa1 rounds up to its 64 and 128 instances (100 is not a multiple of 8: scalar loads);
      // standard takes any head dim up to 256.
      const std::vector<int64_t> dims =
          algo == Algorithm::kStandard ? std::vector<int64_t>{40, 128, 256} : std::vector<int64_t>{32, 80, 100, 128};
      for (int64_t d : dims) {
        Case c;
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
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

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
