// One attention test case on the host: a shape, its memory layout, seeded random inputs, poisoned
// outputs, the API arguments wired to them, and the comparison with the float64 reference. Shared by
// the CPU and GPU test suites (the GPU suites mirror a HostCase on the device: tests/gpu/device_case.h).
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <iostream>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flashattn/attention.h"
#include "reference/harness.h"
#include "reference/reference.h"

namespace flashattn::testing {

// How the q/k/v-like tensors of a case lie in memory.
enum class Layout {
  kContiguous,
  kPadded,           // every row of head_dim followed by CaseSpec::pad unused elements
  kHeadMajor,        // heads outside rows: [.., heads, rows, d] memory viewed as [.., rows, heads, d]
  kBatchHeadMajor,   // kHeadMajor for batched (rank-4) tensors; packed varlen tensors get padded rows
};
// Row padding of the companion tensors (see CaseSpec::layout) and the default of CaseSpec::pad: 16 bytes
// of fp16/bf16, so padded rows stay 16-byte aligned as the cp.async kernels require.
constexpr int64_t kRowPadElems = 8;

struct CaseSpec {
  std::string label;  // the caller's name for the case (a test parameter name); name() starts with it
  int64_t batch = 1, seqlen_q = 16, seqlen_k = 16, heads_q = 2, heads_kv = 2, head_dim = 32;
  DType dtype = DType::kFloat32;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  float scale = 0.0f;  // 0: 1/sqrt(head_dim)
  // Varlen when non-empty: per-sequence lengths (batch = size), packed layout.
  std::vector<int64_t> lens_q, lens_k;
  // Packed rows after the last sequence: no sequence owns them, so out must be 0, lse -inf and their
  // gradients 0 there.
  int64_t varlen_tail_rows = 0;
  // Layout of the primary tensors q, v, dout, dk. The companions k, out, dq, dv are contiguous when it
  // is kContiguous and padded by kRowPadElems otherwise: mixed on purpose, each tensor brings its own strides.
  Layout layout = Layout::kContiguous;
  int64_t pad = kRowPadElems;  // kPadded: elements of padding after each row of the primary tensors
  bool with_lse = true;        // forward: pass lse (backward always needs it)
  // dout, dq, dk, dv are made (and dout drawn) only when set: forward-only cases skip their memory.
  bool with_backward = true;
  Algorithm algorithm = Algorithm::kAuto;
  bool deterministic = false;

  bool varlen() const { return !lens_q.empty(); }
  std::string name() const {
    std::ostringstream s;
    if (!label.empty()) s << label << ": ";
    s << to_string(dtype) << " b" << batch << " sq" << seqlen_q << " sk" << seqlen_k << " h" << heads_q << "/"
      << heads_kv << " d" << head_dim;
    if (causal) s << " causal";
    if (window_left >= 0 || window_right >= 0) s << " win" << window_left << "," << window_right;
    if (softcap > 0) s << " cap" << softcap;
    if (varlen()) {
      s << " varlen(";
      for (size_t i = 0; i < lens_q.size(); ++i) s << (i ? "," : "") << lens_q[i] << ":" << lens_k[i];
      s << ")";
      if (varlen_tail_rows) s << " tail" << varlen_tail_rows;
    }
    if (layout == Layout::kPadded) s << " pad" << pad;
    if (layout == Layout::kHeadMajor || layout == Layout::kBatchHeadMajor) s << " head-major";
    if (deterministic) s << " deterministic";
    return s.str();
  }
};

// gtest prints a case parameter by its name instead of its bytes.
inline void PrintTo(const CaseSpec& s, std::ostream* os) { *os << s.name(); }

// The mask options of a case spec (causal, sliding window, softcap) onto call arguments of any kind
// (AttentionArgs, KVCacheArgs): they travel together, so a new option is wired in one place.
template <typename Spec, typename Args>
void set_mask_options(const Spec& spec, Args* a) {
  a->causal = spec.causal;
  a->window_left = spec.window_left;
  a->window_right = spec.window_right;
  a->softcap = spec.softcap;
}

// A test name for a value-parameterized case: its index (names must be unique) and the spec's name(), every
// character gtest does not accept in a name replaced by '_'.
template <typename Spec>
std::string param_test_name(const ::testing::TestParamInfo<Spec>& info) {
  std::string n = std::to_string(info.index) + "_" + info.param.name();
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

// A seed from harness::pick_seed, printed with the case's label so a failure can be repeated.
inline uint64_t announce_seed(const std::string& label) {
  const uint64_t seed = harness::pick_seed();
  std::cout << "[" << label << "] seed " << seed << " (FLASHATTN_SEED to repeat)\n";
  return seed;
}

// A q/k/v-like tensor of `shape` ([batch, rows, heads, d] or packed [rows, heads, d]) in `layout`.
inline harness::HostTensor make_tensor(DType dtype, std::vector<int64_t> shape, Layout layout,
                                       int64_t pad = kRowPadElems) {
  const bool packed = shape.size() != 4;
  if (layout == Layout::kPadded || (layout == Layout::kBatchHeadMajor && packed))
    return harness::HostTensor::make(dtype, shape, layout == Layout::kPadded ? pad : kRowPadElems);
  if (layout == Layout::kContiguous) return harness::HostTensor::make(dtype, shape);
  // Heads outside rows in memory: allocate with the two dims swapped, then swap the view back.
  const size_t heads_dim = shape.size() - 2, rows_dim = heads_dim - 1;
  std::swap(shape[heads_dim], shape[rows_dim]);
  harness::HostTensor t = harness::HostTensor::make(dtype, shape);
  std::swap(t.view.shape[heads_dim], t.view.shape[rows_dim]);
  std::swap(t.view.stride[heads_dim], t.view.stride[rows_dim]);
  return t;
}

struct HostCase {
  CaseSpec spec;
  harness::HostTensor q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k;

  explicit HostCase(const CaseSpec& s, std::mt19937_64& rng) : spec(s) {
    std::vector<int64_t> qs, ks, ls;
    if (s.varlen()) {
      int64_t tq = 0, tk = 0;
      cu_q = harness::HostTensor::make(DType::kInt32, {int64_t(s.lens_q.size()) + 1});
      cu_k = harness::HostTensor::make(DType::kInt32, {int64_t(s.lens_k.size()) + 1});
      cu_q.set(0, 0);
      cu_k.set(0, 0);
      for (size_t i = 0; i < s.lens_q.size(); ++i) {
        tq += s.lens_q[i];
        tk += s.lens_k[i];
        cu_q.set(int64_t(i) + 1, double(tq));
        cu_k.set(int64_t(i) + 1, double(tk));
      }
      tq += s.varlen_tail_rows;
      tk += s.varlen_tail_rows;
      qs = {tq, s.heads_q, s.head_dim};
      ks = {tk, s.heads_kv, s.head_dim};
      ls = {s.heads_q, tq};
    } else {
      qs = {s.batch, s.seqlen_q, s.heads_q, s.head_dim};
      ks = {s.batch, s.seqlen_k, s.heads_kv, s.head_dim};
      ls = {s.batch, s.heads_q, s.seqlen_q};
    }
    const Layout primary = s.layout;
    const Layout companion = s.layout == Layout::kContiguous ? Layout::kContiguous : Layout::kPadded;
    q = make_tensor(s.dtype, qs, primary, s.pad);
    k = make_tensor(s.dtype, ks, companion);
    v = make_tensor(s.dtype, ks, primary, s.pad);
    out = make_tensor(s.dtype, qs, companion);
    lse = harness::HostTensor::make(DType::kFloat32, ls);
    if (s.with_backward) {
      dout = make_tensor(s.dtype, qs, primary, s.pad);
      dq = make_tensor(s.dtype, qs, companion);
      dk = make_tensor(s.dtype, ks, primary, s.pad);
      dv = make_tensor(s.dtype, ks, companion);
    }
    harness::fill_uniform(&q, rng);
    harness::fill_uniform(&k, rng);
    harness::fill_uniform(&v, rng);
    if (s.with_backward) harness::fill_uniform(&dout, rng);
    poison_outputs();
  }

  void poison_outputs() {
    for (harness::HostTensor* t : {&out, &lse, &dq, &dk, &dv}) harness::poison(t);
  }

  // Arguments on the host tensors (the reference, the CPU backend); backend left to the caller.
  AttentionArgs args() const {
    AttentionArgs a;
    a.q = q.view;
    a.k = k.view;
    a.v = v.view;
    a.out = out.view;
    if (spec.with_lse) a.lse = lse.view;
    if (spec.varlen()) {
      a.cu_seqlens_q = cu_q.view;
      a.cu_seqlens_k = cu_k.view;
    }
    a.softmax_scale = spec.scale;
    set_mask_options(spec, &a);
    a.algorithm = spec.algorithm;
    a.deterministic = spec.deterministic;
    return a;
  }

  BackwardArgs backward_args() const {
    BackwardArgs b;
    b.fwd = args();
    b.fwd.lse = lse.view;
    b.dout = dout.view;
    b.dq = dq.view;
    b.dk = dk.view;
    b.dv = dv.view;
    return b;
  }

  // Overwrites out and lse with a forward result (e.g. the float64 reference, rounded to the tensors'
  // dtypes), so that a backward does not depend on any forward kernel. False on a size mismatch.
  bool set_forward_outputs(const std::vector<double>& out_values, const std::vector<double>& lse_values) {
    if (int64_t(out_values.size()) != out.numel() || int64_t(lse_values.size()) != lse.numel()) return false;
    for (int64_t i = 0; i < out.numel(); ++i) out.set(i, out_values[size_t(i)]);
    for (int64_t i = 0; i < lse.numel(); ++i) lse.set(i, lse_values[size_t(i)]);
    return true;
  }
};

// One output against the reference: every element written (no NaN poison left), no storage outside the
// logical elements touched, and the error within the tolerance rule of harness::judge. The verdict goes
// to `log` as "  name verdict" when given.
inline harness::Verdict expect_matches_reference(const std::string& name, const harness::HostTensor& got,
                                                 const std::vector<double>& ref, const std::vector<double>& naive,
                                                 DType dtype, std::ostream* log = nullptr) {
  EXPECT_EQ(harness::count_nan(got), 0) << name << ": elements left unwritten (still NaN)";
  EXPECT_EQ(harness::count_touched_padding(got), 0) << name << ": padding between rows was overwritten";
  const harness::Verdict v =
      harness::judge(harness::max_abs_diff(got, ref), harness::max_abs_diff(naive, ref), dtype, harness::max_abs(ref));
  EXPECT_TRUE(v.pass) << name << ": " << v.describe();
  if (log) *log << "  " << name << " " << v.describe() << "\n";
  return v;
}

}  // namespace flashattn::testing
