// The steps the CUDA forward suites share: what each algorithm builds (head dims, kernel names, the
// compute capability it needs), one case run into poisoned outputs and compared with the float64
// reference, and the check of sampled rows for sequences too long for the full reference.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/attention_case.h"
#include "core/numeric.h"
#include "device_case.h"
#include "flashattn/attention.h"
#include "reference/harness.h"
#include "reference/reference.h"

namespace flashattn::testing {

// One CUDA forward algorithm as the suites see it.
struct ForwardAlgo {
  const char* name;  // "fa2": the parameter name of the suites' tests
  Algorithm algorithm;
  const char* kernel_prefix;       // every kernel it runs is named so (RunInfo::kernel)
  std::vector<int64_t> head_dims;  // the head dims it has kernels for, ascending
  int cc_major, cc_minor;          // the compute capability it needs exactly (0: any the library runs on)
  bool negative_scale;             // runs a negative softmax scale (else refuses it)
  bool pads_head_dim;              // runs multiples of 8 between its sizes on the next larger kernel

  // The smallest built head dim >= wanted (the largest when wanted is beyond it): the suites name the
  // head dims of their shapes and each algorithm runs the nearest one it has.
  int64_t dim(int64_t wanted) const {
    for (int64_t d : head_dims)
      if (d >= wanted) return d;
    return head_dims.back();
  }
  // dim() of each wanted value, without repeats.
  std::vector<int64_t> dims(std::initializer_list<int64_t> wanted) const {
    std::vector<int64_t> out;
    for (int64_t w : wanted)
      if (std::find(out.begin(), out.end(), dim(w)) == out.end()) out.push_back(dim(w));
    return out;
  }
};

inline const ForwardAlgo& fa2_algo() {
  static const ForwardAlgo a{"fa2", Algorithm::kFA2, "fa2_fwd_sm80_", {64, 96, 128, 192, 256}, 0, 0, true, true};
  return a;
}
// fa3 uses sm90a-only instructions (wgmma, setmaxnreg): compute capability 9.0 exactly.
inline const ForwardAlgo& fa3_algo() {
  static const ForwardAlgo a{"fa3", Algorithm::kFA3, "fa3_fwd_sm90_", {64, 128, 256}, 9, 0, false, true};
  return a;
}

// Compute capability of device 0 ({0, 0} when it cannot be read).
inline std::pair<int, int> device_capability() {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess) {
    cudaGetLastError();
    return {0, 0};
  }
  return {major, minor};
}

// Empty when device 0 runs `algo`, else why the test is skipped. A device that can run it must pass:
// an algorithm that refuses there fails its tests, it does not skip them.
inline std::string unsupported_device(const ForwardAlgo& algo) {
  if (algo.cc_major == 0) return "";
  const auto [major, minor] = device_capability();
  if (major == algo.cc_major && minor == algo.cc_minor) return "";
  return std::string(algo.name) + " needs compute capability " + std::to_string(algo.cc_major) + "." +
         std::to_string(algo.cc_minor) + "; device 0 is " + std::to_string(major) + "." + std::to_string(minor);
}

#define FA_SKIP_UNLESS_DEVICE_RUNS(algo)                                                          \
  FA_SKIP_WITHOUT_GPU();                                                                          \
  if (const std::string why = ::flashattn::testing::unsupported_device(algo); !why.empty())      \
  GTEST_SKIP() << why << ": GPU test skipped"

// One base seed per process (printed), one derived seed per case.
inline uint64_t next_forward_seed() {
  static const uint64_t base = [] {
    const uint64_t s = harness::pick_seed();
    std::cout << "[gpu forward] seed " << s << " (set FLASHATTN_SEED to repeat)\n";
    return s;
  }();
  static uint64_t count = 0;
  return base + count++;
}

// A forward-only case on `algo`: batch 1, 2 heads, lse on.
inline CaseSpec forward_case(const ForwardAlgo& algo, std::string label, DType dtype, int64_t d, int64_t sq,
                             int64_t sk) {
  CaseSpec c;
  c.label = std::move(label);
  c.dtype = dtype;
  c.head_dim = d;
  c.seqlen_q = sq;
  c.seqlen_k = sk;
  c.algorithm = algo.algorithm;
  c.with_backward = false;
  return c;
}

// How a case is run: forward() by default, or another entry point with forward's contract.
using ForwardCall = std::function<Status(const AttentionArgs&, RunInfo*)>;
inline ForwardCall plain_forward() {
  return [](const AttentionArgs& a, RunInfo* info) { return forward(a, info); };
}

// Runs `call` on the device copy of `h`, waits, checks the kernel name and downloads out and lse.
// Call under ASSERT_NO_FATAL_FAILURE.
inline void run_on_device(HostCase* h, const ForwardCall& call, const std::string& kernel_prefix, RunInfo* info) {
  DeviceCase d(*h);
  const Status s = call(d.forward_args(), info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_kernel(*info, kernel_prefix);
  d.download_forward(h);
}

// Logical index of the first element of the out row that lse element `i` describes.
inline int64_t out_row_of_lse(const HostCase& h, int64_t i) {
  const CaseSpec& c = h.spec;
  const int64_t d = c.head_dim;
  if (c.varlen()) {
    const int64_t total = h.q.view.shape[0];
    const int64_t head = i / total, t = i % total;
    return (t * c.heads_q + head) * d;
  }
  const int64_t row = i % c.seqlen_q, head = (i / c.seqlen_q) % c.heads_q, b = i / (c.seqlen_q * c.heads_q);
  return ((b * c.seqlen_q + row) * c.heads_q + head) * d;
}

// Reshapes a case's drawn inputs before the run (the reference sees the same), e.g. scores far apart.
using InputShaper = std::function<void(HostCase*)>;

// The whole check of one case: fresh seeded inputs (then `shape_inputs`, where given), poisoned outputs, the
// run, every element written (padding untouched), out and lse within the tolerance rule, rows that see no key
// exactly 0 / -inf.
inline void check_forward_case(const CaseSpec& c, const std::string& kernel_prefix,
                               const ForwardCall& call = plain_forward(), const InputShaper& shape_inputs = {}) {
  const uint64_t seed = next_forward_seed();
  SCOPED_TRACE(c.name() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostCase h(c, rng);
  if (shape_inputs) shape_inputs(&h);

  RunInfo info;
  ASSERT_NO_FATAL_FAILURE(run_on_device(&h, call, kernel_prefix, &info));

  reference::Result ref, naive;
  ASSERT_TRUE(reference::forward(h.args(), reference::Precision::kFloat64, &ref).ok());
  ASSERT_TRUE(reference::forward(h.args(), reference::Precision::kNaive, &naive).ok());

  const harness::Verdict vo = expect_matches_reference("out", h.out, ref.out, naive.out, c.dtype);

  int64_t empty_rows = 0;
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    if (ref.lse[i] != -std::numeric_limits<double>::infinity()) continue;
    ++empty_rows;
    const int64_t first = out_row_of_lse(h, int64_t(i));
    for (int64_t x = 0; x < c.head_dim; ++x) ASSERT_EQ(h.out.get(first + x), 0.0) << "empty row " << i;
  }

  std::cout << "  " << c.name() << " " << info.kernel << " out " << vo.describe();
  if (c.with_lse) {
    const harness::Verdict vl = expect_matches_reference("lse", h.lse, ref.lse, naive.lse, c.dtype);
    std::cout << " | lse " << vl.describe();
  }
  std::cout << (empty_rows ? " | empty rows " + std::to_string(empty_rows) : "") << "\n";
}

// One row in the inputs' precision, as reference::Precision::kNaive computes it (scores, probabilities
// and output rounded to the dtype, fp32 accumulation): the naive error of a sampled row. Causal here
// means j <= i (the sampled cases have seqlen_q == seqlen_k).
inline std::vector<double> naive_row(const std::vector<float>& qrow, const std::vector<float>& kh,
                                     const std::vector<float>& vh, int64_t lk, int64_t d, int64_t row, bool causal,
                                     float scale, DType dtype) {
  auto round = [dtype](float x) {
    return dtype == DType::kFloat16 ? core::fp16_bits_to_float(core::float_to_fp16_bits(x))
                                    : core::bf16_bits_to_float(core::float_to_bf16_bits(x));
  };
  const int64_t end = causal ? row + 1 : lk;
  std::vector<float> s(static_cast<size_t>(end));
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < end; ++j) {
    float dot = 0;
    for (int64_t x = 0; x < d; ++x) dot += qrow[size_t(x)] * kh[size_t(j * d + x)];
    s[size_t(j)] = round(dot * scale);
    m = std::max(m, s[size_t(j)]);
  }
  float sum = 0;
  for (int64_t j = 0; j < end; ++j) sum += std::exp(s[size_t(j)] - m);
  std::vector<float> acc(size_t(d), 0.0f);
  for (int64_t j = 0; j < end; ++j) {
    const float p = round(std::exp(s[size_t(j)] - m) / sum);
    for (int64_t x = 0; x < d; ++x) acc[size_t(x)] += p * vh[size_t(j * d + x)];
  }
  std::vector<double> out(static_cast<size_t>(d));
  for (int64_t x = 0; x < d; ++x) out[size_t(x)] = round(acc[size_t(x)]);
  return out;
}

// Compares `rows_per_head` rows of every (batch, head) of a computed case with the float64 reference row
// by row: the ends of the sequence and of the first and last 128-row tiles, plus random rows. For shapes
// whose full reference would take minutes. Needs a contiguous padded case with seqlen_q == seqlen_k,
// no window and no softcap (the naive row above knows only plain and causal attention).
inline void expect_sampled_rows_match(const HostCase& h, int rows_per_head, std::mt19937_64& rng,
                                      const std::string& what) {
  const CaseSpec& c = h.spec;
  ASSERT_TRUE(!c.varlen() && c.layout == Layout::kContiguous && c.seqlen_q == c.seqlen_k && c.softcap == 0 &&
              c.window_left < 0 && c.window_right < 0 && c.scale == 0)
      << "sampled rows need a plain contiguous square case: " << c.name();
  EXPECT_EQ(harness::count_nan(h.out), 0);
  if (c.with_lse) EXPECT_EQ(harness::count_nan(h.lse), 0);

  const int64_t n = c.seqlen_q, d = c.head_dim, hq = c.heads_q, hkv = c.heads_kv;
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<double> got_out, ref_out, naive_out, got_lse, ref_lse;
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int64_t b = 0; b < c.batch; ++b) {
    std::map<int64_t, std::pair<std::vector<float>, std::vector<float>>> kv;  // per KV head: K and V rows
    for (int64_t head = 0; head < hq; ++head) {
      const int64_t hk = head / (hq / hkv);
      auto& [kh, vh] = kv[hk];
      if (kh.empty()) {
        kh.resize(size_t(n * d));
        vh.resize(size_t(n * d));
        for (int64_t j = 0; j < n; ++j)
          for (int64_t x = 0; x < d; ++x) {
            kh[size_t(j * d + x)] = float(h.k.get(((b * n + j) * hkv + hk) * d + x));
            vh[size_t(j * d + x)] = float(h.v.get(((b * n + j) * hkv + hk) * d + x));
          }
      }
      std::vector<int64_t> rows = {0, 1, 127, 128, n - 129, n - 1};
      while (int64_t(rows.size()) < rows_per_head) rows.push_back(pick(rng));
      for (int64_t row : rows) {
        std::vector<double> ref;
        double lse = 0;
        ASSERT_TRUE(reference::forward_row(h.args(), {b, head, row}, &ref, &lse).ok());
        const int64_t first = ((b * n + row) * hq + head) * d;
        std::vector<float> qrow(static_cast<size_t>(d));
        for (int64_t x = 0; x < d; ++x) qrow[size_t(x)] = float(h.q.get(first + x));
        const std::vector<double> nv = naive_row(qrow, kh, vh, n, d, row, c.causal, scale, c.dtype);
        for (int64_t x = 0; x < d; ++x) {
          got_out.push_back(h.out.get(first + x));
          ref_out.push_back(ref[size_t(x)]);
          naive_out.push_back(nv[size_t(x)]);
        }
        if (c.with_lse) {
          got_lse.push_back(h.lse.get((b * hq + head) * n + row));
          ref_lse.push_back(lse);
        }
      }
    }
  }
  const harness::Verdict v = harness::judge(harness::max_abs_diff(got_out, ref_out),
                                            harness::max_abs_diff(naive_out, ref_out), c.dtype,
                                            harness::max_abs(ref_out));
  EXPECT_TRUE(v.pass) << "out: " << v.describe();
  std::cout << "  " << what << " " << c.name() << " sampled " << c.batch * hq * rows_per_head << " rows: out "
            << v.describe();
  if (c.with_lse) {
    const double lse_err = harness::max_abs_diff(got_lse, ref_lse);
    // The naive lse is not reproduced here; its rounding of the scores to 16 bits alone is about
    // |lse| * 2^-8 (bf16), so a correct fp32 lse stays far below this bound.
    EXPECT_LT(lse_err, 1e-3 * std::max(1.0, harness::max_abs(ref_lse))) << "lse err " << lse_err;
    std::cout << " | lse err " << lse_err;
  }
  std::cout << "\n";
}

}  // namespace flashattn::testing
