// One attention test case on the host: a shape, its random inputs, poisoned outputs, and the API
// arguments wired to them. Shared by the test suites.
#pragma once

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flashattn/attention.h"
#include "reference/harness.h"
#include "reference/reference.h"

namespace flashattn::testing {

struct CaseSpec {
  int64_t batch = 1, seqlen_q = 16, seqlen_k = 16, heads_q = 2, heads_kv = 2, head_dim = 32;
  DType dtype = DType::kFloat32;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  float scale = 0.0f;
  // Varlen when non-empty: per-sequence lengths (batch = size), packed layout.
  std::vector<int64_t> lens_q, lens_k;
  int64_t pad = 0;  // extra elements per row of every q/k/v/out-like tensor: non-contiguous strides
  bool with_lse = true;

  bool varlen() const { return !lens_q.empty(); }
  std::string name() const {
    std::ostringstream s;
    s << to_string(dtype) << " b" << batch << " sq" << seqlen_q << " sk" << seqlen_k << " h" << heads_q << "/"
      << heads_kv << " d" << head_dim;
    if (causal) s << " causal";
    if (window_left >= 0 || window_right >= 0) s << " win" << window_left << "," << window_right;
    if (softcap > 0) s << " cap" << softcap;
    if (varlen()) {
      s << " varlen(";
      for (size_t i = 0; i < lens_q.size(); ++i) s << (i ? "," : "") << lens_q[i] << ":" << lens_k[i];
      s << ")";
    }
    if (pad) s << " pad" << pad;
    return s.str();
  }
};

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
      qs = {tq, s.heads_q, s.head_dim};
      ks = {tk, s.heads_kv, s.head_dim};
      ls = {s.heads_q, tq};
    } else {
      qs = {s.batch, s.seqlen_q, s.heads_q, s.head_dim};
      ks = {s.batch, s.seqlen_k, s.heads_kv, s.head_dim};
      ls = {s.batch, s.heads_q, s.seqlen_q};
    }
    q = harness::HostTensor::make(s.dtype, qs, s.pad);
    k = harness::HostTensor::make(s.dtype, ks, s.pad);
    v = harness::HostTensor::make(s.dtype, ks, s.pad);
    out = harness::HostTensor::make(s.dtype, qs, s.pad);
    dout = harness::HostTensor::make(s.dtype, qs, s.pad);
    dq = harness::HostTensor::make(s.dtype, qs, s.pad);
    dk = harness::HostTensor::make(s.dtype, ks, s.pad);
    dv = harness::HostTensor::make(s.dtype, ks, s.pad);
    lse = harness::HostTensor::make(DType::kFloat32, ls);
    harness::fill_uniform(&q, rng);
    harness::fill_uniform(&k, rng);
    harness::fill_uniform(&v, rng);
    harness::fill_uniform(&dout, rng);
    poison_outputs();
  }

  void poison_outputs() {
    for (harness::HostTensor* t : {&out, &lse, &dq, &dk, &dv}) harness::poison(t);
  }

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
    a.causal = spec.causal;
    a.window_left = spec.window_left;
    a.window_right = spec.window_right;
    a.softcap = spec.softcap;
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
};

}  // namespace flashattn::testing
