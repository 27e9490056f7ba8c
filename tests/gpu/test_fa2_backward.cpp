// The fa2 CUDA backward against the float64 reference: dq, dk, dv on fresh seeded inputs, with the
// tolerance rule of harness::judge, poisoned gradients (every element written, no byte of row padding
// touched), and bitwise-reproducible gradients in deterministic mode.
//
// out and lse come from the float64 reference forward (rounded to the test dtype / float32), so these
// tests do not depend on any forward kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// How the q/k/v-like tensors are laid out in memory.
enum class Layout {
  kContiguous,
  kPadded,      // every row of head_dim padded (non-contiguous head and row strides)
  kHeadMajor,   // [batch, heads, seqlen, d] memory viewed as [batch, seqlen, heads, d]; padded for varlen
};
constexpr int64_t kRowPadElems = 8;  // keeps rows 16-byte aligned, as the fa2 kernels require
constexpr int64_t kVarlenTailRows = 3;  // packed rows after the last sequence: their gradients must be 0

struct Case {
  std::string name;
  DType dtype = DType::kBFloat16;
  int64_t batch = 2, heads_q = 2, heads_kv = 2, seqlen_q = 64, seqlen_k = 64, head_dim = 128;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  float scale = 0.0f;                  // 0: 1/sqrt(d)
  std::vector<int64_t> lens_q, lens_k;  // varlen when non-empty
  Layout layout = Layout::kContiguous;
  bool deterministic = false;

  bool varlen() const { return !lens_q.empty(); }
};

HostTensor make_tensor(DType dtype, std::vector<int64_t> shape, Layout layout) {
  if (layout == Layout::kPadded || (layout == Layout::kHeadMajor && shape.size() != 4))
    return HostTensor::make(dtype, shape, kRowPadElems);
  if (layout == Layout::kContiguous) return HostTensor::make(dtype, shape);
  HostTensor t = HostTensor::make(dtype, {shape[0], shape[2], shape[1], shape[3]});
  std::swap(t.view.shape[1], t.view.shape[2]);
  std::swap(t.view.stride[1], t.view.stride[2]);
  return t;
}

// Every q/k/v-like tensor of one case on the host, and its forward outputs from the float64 reference.
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
    // Mixed layouts on purpose: each tensor brings its own strides.
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
    harness::fill_uniform(&q, rng);
    harness::fill_uniform(&k, rng);
    harness::fill_uniform(&v, rng);
    harness::fill_uniform(&dout, rng);
    harness::poison(&out);
    harness::poison(&lse);
    poison_gradients();
  }

  void poison_gradients() {
    for (HostTensor* t : {&dq, &dk, &dv}) harness::poison(t);
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

  // out and lse of the float64 forward, rounded to the tensors' dtypes.
  void fill_forward_outputs() {
    reference::Result r;
    ASSERT_TRUE(reference::forward(forward_args(), reference::Precision::kFloat64, &r).ok());
    ASSERT_EQ(int64_t(r.out.size()), out.numel());
    ASSERT_EQ(int64_t(r.lse.size()), lse.numel());
    for (int64_t i = 0; i < out.numel(); ++i) out.set(i, r.out[size_t(i)]);
    for (int64_t i = 0; i < lse.numel(); ++i) lse.set(i, r.lse[size_t(i)]);
  }
};

// The same tensors on the device (gradients uploaded poisoned).
struct DeviceProblem {
  DeviceTensor q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k;

  explicit DeviceProblem(const HostProblem& h) {
    q.upload(h.q);
    k.upload(h.k);
    v.upload(h.v);
    out.upload(h.out);
    lse.upload(h.lse);
    dout.upload(h.dout);
    dq.upload(h.dq);
    dk.upload(h.dk);
    dv.upload(h.dv);
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
    a.algorithm = flashattn::Algorithm::kFA2;
    a.deterministic = c.deterministic;
    b.dout = dout.view();
    b.dq = dq.view();
    b.dk = dk.view();
    b.dv = dv.view();
    return b;
  }
};

// Storage elements outside the tensor's logical elements (row padding, the gaps of a permuted view)
// that no longer hold the poison pattern: a kernel wrote where it must not.
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
    if (!logical[size_t(s)] && std::memcmp(&t.storage[size_t(s * elem)], &fresh.storage[size_t(s * elem)], size_t(elem)))
      ++touched;
  return touched;
}

void check_gradient(const char* name, const HostTensor& got, const std::vector<double>& ref,
                    const std::vector<double>& naive, DType dtype) {
  EXPECT_EQ(harness::count_nan(got), 0) << name << ": elements left unwritten (still NaN)";
  EXPECT_EQ(touched_padding(got), 0) << name << ": padding between rows was overwritten";
  const harness::Verdict v = harness::judge(harness::max_abs_diff(got, ref), harness::max_abs_diff(naive, ref), dtype,
                                            harness::max_abs(ref));
  EXPECT_TRUE(v.pass) << name << ": " << v.describe();
  std::cout << "  " << name << " " << v.describe() << "\n";
}

class Fa2Backward : public ::testing::TestWithParam<Case> {};

TEST_P(Fa2Backward, MatchesFloat64Reference) {
  FA_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const uint64_t seed = harness::pick_seed();
  std::cout << "[" << c.name << "] seed " << seed << " (FLASHATTN_SEED to repeat)\n";
  std::mt19937_64 rng(seed);
  HostProblem h(c, rng);
  h.fill_forward_outputs();
  reference::Result ref, naive;
  ASSERT_TRUE(reference::backward(h.backward_args(), reference::Precision::kFloat64, &ref).ok());
  ASSERT_TRUE(reference::backward(h.backward_args(), reference::Precision::kNaive, &naive).ok());

  DeviceProblem d(h);
  RunInfo info;
  const Status s = flashattn::backward(d.args(c), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(info.kernel.rfind("fa2_bwd_sm80_", 0), 0u) << info.kernel;
  d.dq.download(&h.dq);
  d.dk.download(&h.dk);
  d.dv.download(&h.dv);
  check_gradient("dq", h.dq, ref.dq, naive.dq, c.dtype);
  check_gradient("dk", h.dk, ref.dk, naive.dk, c.dtype);
  check_gradient("dv", h.dv, ref.dv, naive.dv, c.dtype);
}

const char* dtype_tag(DType d) { return d == DType::kFloat16 ? "fp16" : "bf16"; }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  auto add = [&](Case c) {
    c.name = std::string(dtype_tag(c.dtype)) + "_" + c.name + (c.deterministic ? "_det" : "");
    cases.push_back(std::move(c));
  };
  const DType kDtypes[] = {DType::kBFloat16, DType::kFloat16};
  struct Len {
    int64_t q, k;
  };
  const Len kShapes[] = {{1, 1}, {17, 17}, {113, 113}, {1007, 1007}, {113, 203},
                         {1023, 1024}, {1024, 1023}, {1, 239}, {799, 3}};
  for (DType dt : kDtypes) {
    // Every shape at d = 128, with and without the causal mask (seqlen_q > seqlen_k leaves rows that see no key).
    for (const Len& l : kShapes)
      for (bool causal : {false, true}) {
        Case c;
        c.dtype = dt;
        c.seqlen_q = l.q;
        c.seqlen_k = l.k;
        c.batch = l.q * l.k > 100000 ? 1 : 2;
        c.causal = causal;
        c.name = "sq" + std::to_string(l.q) + "_sk" + std::to_string(l.k) + (causal ? "_causal" : "");
        add(c);
      }
    // Every head dim.
    for (int64_t d : {64, 96, 128, 192, 256})
      for (bool causal : {false, true}) {
        Case c;
        c.dtype = dt;
        c.head_dim = d;
        c.seqlen_q = causal ? 113 : 257;
        c.seqlen_k = causal ? 203 : 190;
        c.causal = causal;
        c.name = "hd" + std::to_string(d) + (causal ? "_sq113_sk203_causal" : "_sq257_sk190");
        add(c);
      }
    {
      Case c;
      c.dtype = dt;
      c.seqlen_q = 300;
      c.seqlen_k = 100;
      c.causal = true;
      c.name = "causal_rows_without_keys_sq300_sk100";
      add(c);
    }
    {
      Case c;
      c.dtype = dt;
      c.seqlen_q = 300;
      c.seqlen_k = 280;
      c.window_left = 37;
      c.window_right = 11;
      c.name = "window_37_11";
      add(c);
    }
    {
      Case c;
      c.dtype = dt;
      c.seqlen_q = 200;
      c.seqlen_k = 330;
      c.window_left = 64;
      c.causal = true;
      c.head_dim = 64;
      c.name = "causal_window_left_64_hd64";
      add(c);
    }
    {
      // A large scale drives scores into the saturating part of tanh.
      Case c;
      c.dtype = dt;
      c.seqlen_q = 150;
      c.seqlen_k = 170;
      c.softcap = 1.0f;
      c.scale = 0.5f;
      c.name = "softcap1_scale05";
      add(c);
    }
    {
      Case c;
      c.dtype = dt;
      c.heads_q = 16;
      c.heads_kv = 2;
      c.seqlen_q = 257;
      c.seqlen_k = 300;
      c.causal = true;
      c.name = "gqa_16_2_causal";
      add(c);
    }
    {
      Case c;
      c.dtype = dt;
      c.heads_q = 4;
      c.heads_kv = 1;
      c.seqlen_q = 190;
      c.seqlen_k = 190;
      c.head_dim = 96;
      c.name = "mqa_4_1_hd96";
      add(c);
    }
    for (bool causal : {false, true}) {
      Case c;
      c.dtype = dt;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.lens_q = {37, 0, 113, 64, 130};
      c.lens_k = {80, 50, 0, 64, 129};
      c.batch = 5;
      c.causal = causal;
      c.name = std::string("varlen_empty_seqs") + (causal ? "_causal" : "");
      add(c);
    }
    for (Layout layout : {Layout::kPadded, Layout::kHeadMajor}) {
      Case c;
      c.dtype = dt;
      c.seqlen_q = 140;
      c.seqlen_k = 77;
      c.layout = layout;
      c.causal = layout == Layout::kHeadMajor;
      c.name = layout == Layout::kPadded ? "strided_padded_rows" : "strided_head_major_causal";
      add(c);
    }
    {
      Case c;
      c.dtype = dt;
      c.lens_q = {65, 0, 31};
      c.lens_k = {100, 7, 40};
      c.batch = 3;
      c.layout = Layout::kHeadMajor;
      c.name = "varlen_strided";
      add(c);
    }
  }
  // The deterministic path (a separate dQ kernel) through the same features.
  const size_t n = cases.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string& nm = cases[i].name;
    const bool pick = nm.find("sq1023") != std::string::npos || nm.find("hd64") != std::string::npos ||
                      nm.find("hd192") != std::string::npos || nm.find("hd256") != std::string::npos ||
                      nm.find("window") != std::string::npos || nm.find("softcap") != std::string::npos ||
                      nm.find("gqa") != std::string::npos || nm.find("varlen") != std::string::npos ||
                      nm.find("without_keys") != std::string::npos || nm.find("sq1_") != std::string::npos ||
                      nm.find("sq799") != std::string::npos || nm.find("strided") != std::string::npos;
    if (!pick) continue;
    Case c = cases[i];
    c.deterministic = true;
    c.name += "_det";
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, Fa2Backward, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Deterministic mode: the same inputs give bitwise-equal dq, dk, dv over many runs (causal + GQA, so
// that dK/dV sum over a group and dQ over several KV tiles).
TEST(Fa2BackwardDeterministic, FiftyRunsBitwiseEqual) {
  FA_SKIP_WITHOUT_GPU();
  constexpr int kRuns = 50;
  Case c;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.seqlen_q = 700;
  c.seqlen_k = 900;
  c.causal = true;
  c.deterministic = true;
  const uint64_t seed = harness::pick_seed();
  std::cout << "seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  HostProblem h(c, rng);
  h.fill_forward_outputs();
  DeviceProblem d(h);
  HostTensor first_dq = h.dq, first_dk = h.dk, first_dv = h.dv;
  for (int run = 0; run < kRuns; ++run) {
    ASSERT_TRUE(flashattn::backward(d.args(c)).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostTensor* dst[3] = {&h.dq, &h.dk, &h.dv};
    d.dq.download(dst[0]);
    d.dk.download(dst[1]);
    d.dv.download(dst[2]);
    if (run == 0) {
      first_dq = h.dq, first_dk = h.dk, first_dv = h.dv;
      ASSERT_EQ(harness::count_nan(first_dq), 0);
      continue;
    }
    ASSERT_EQ(h.dq.storage, first_dq.storage) << "dq differs in run " << run;
    ASSERT_EQ(h.dk.storage, first_dk.storage) << "dk differs in run " << run;
    ASSERT_EQ(h.dv.storage, first_dv.storage) << "dv differs in run " << run;
  }
}

// What the dispatcher learns from fa2_backward_supports: the kernel name, and clear refusals.
TEST(Fa2BackwardSupport, NamesKernelAndRefusesWhatIsNotBuilt) {
  FA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(1);
  Case c;
  c.seqlen_q = c.seqlen_k = 8;
  {
    HostProblem h(c, rng);
    DeviceProblem d(h);
    RunInfo info;
    const Status s = flashattn::check_supported(d.args(c), &info);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(info.kernel, "fa2_bwd_sm80_bf16_hd128_n128m64");
  }
  {
    Case odd = c;
    odd.head_dim = 80;
    HostProblem h(odd, rng);
    DeviceProblem d(h);
    const Status s = flashattn::check_supported(d.args(odd));
    EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
    EXPECT_NE(s.message().find("head_dim"), std::string::npos) << s.message();
  }
  {
    // A row stride of 132 elements (264 bytes) breaks the 16-byte rows cp.async needs.
    Case f = c;
    f.head_dim = 128;
    HostProblem h(f, rng);
    h.q = HostTensor::make(f.dtype, {f.batch, f.seqlen_q, f.heads_q, f.head_dim}, 4);
    DeviceProblem d(h);
    const Status s = flashattn::check_supported(d.args(f));
    EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
    EXPECT_NE(s.message().find("16-byte"), std::string::npos) << s.message();
  }
}

// Speed print, not an assertion (timing belongs to benchmarks): run with --gtest_also_run_disabled_tests.
// FLOPs as in the FlashAttention papers: backward = 2.5 * 4 * B * H * N * N * d, half for causal.
TEST(Fa2BackwardSpeed, DISABLED_PrintTflops) {
  FA_SKIP_WITHOUT_GPU();
  constexpr int64_t kB = 4, kH = 16, kN = 8192, kD = 128;
  constexpr int kWarmup = 3, kRuns = 10;
  for (bool det : {false, true})
    for (bool causal : {false, true}) {
      Case c;
      c.batch = kB;
      c.heads_q = c.heads_kv = kH;
      c.seqlen_q = c.seqlen_k = kN;
      c.head_dim = kD;
      c.causal = causal;
      c.deterministic = det;
      // Inputs: one random block repeated (the values do not change the work); lse near log(N).
      std::mt19937_64 rng(3);
      HostTensor block = HostTensor::make(DType::kBFloat16, {1 << 20});
      harness::fill_uniform(&block, rng);
      const std::vector<int64_t> shape = {kB, kN, kH, kD};
      std::vector<DeviceTensor> t(8);
      for (auto& dt : t) {
        HostTensor big = HostTensor::make(DType::kBFloat16, shape);
        for (size_t off = 0; off < big.storage.size(); off += block.storage.size())
          std::memcpy(&big.storage[off], block.storage.data(), std::min(block.storage.size(), big.storage.size() - off));
        dt.upload(big);
      }
      HostTensor lse = HostTensor::make(DType::kFloat32, {kB, kH, kN});
      harness::fill_uniform(&lse, rng, 1.0);
      for (int64_t i = 0; i < lse.numel(); ++i) lse.set(i, lse.get(i) + std::log(double(kN)));
      DeviceTensor dlse(lse);
      BackwardArgs b;
      b.fwd.q = t[0].view();
      b.fwd.k = t[1].view();
      b.fwd.v = t[2].view();
      b.fwd.out = t[3].view();
      b.fwd.lse = dlse.view();
      b.fwd.causal = causal;
      b.fwd.backend = flashattn::Backend::kCUDA;
      b.fwd.algorithm = flashattn::Algorithm::kFA2;
      b.fwd.deterministic = det;
      b.dout = t[4].view();
      b.dq = t[5].view();
      b.dk = t[6].view();
      b.dv = t[7].view();
      cudaEvent_t start, stop;
      ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
      ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
      std::vector<float> ms;
      for (int i = 0; i < kWarmup + kRuns; ++i) {
        ASSERT_EQ(cudaEventRecord(start), cudaSuccess);
        const Status s = flashattn::backward(b);
        ASSERT_TRUE(s.ok()) << s.to_string();
        ASSERT_EQ(cudaEventRecord(stop), cudaSuccess);
        ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
        float elapsed = 0;
        ASSERT_EQ(cudaEventElapsedTime(&elapsed, start, stop), cudaSuccess);
        if (i >= kWarmup) ms.push_back(elapsed);
      }
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      std::sort(ms.begin(), ms.end());
      const double median_ms = ms[ms.size() / 2];
      const double flops = 2.5 * 4.0 * kB * kH * double(kN) * kN * kD * (causal ? 0.5 : 1.0);
      std::cout << "fa2 backward bf16 b" << kB << " h" << kH << " n" << kN << " d" << kD
                << (causal ? " causal" : " full") << (det ? " deterministic" : "") << ": " << median_ms << " ms, "
                << flops / (median_ms * 1e-3) / 1e12 << " TFLOP/s\n";
    }
}

}  // namespace
