// A HostCase mirrored on the device for the GPU suites, and the steps they share: run forward or
// backward on the CUDA backend into poisoned outputs, download, compare with the float64 reference.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <string>

#include "common/attention_case.h"
#include "device_tensor.h"
#include "flashattn/attention.h"
#include "reference/harness.h"
#include "reference/reference.h"

namespace flashattn::testing {

// Device copies of every tensor of a HostCase, byte for byte (same strides, padding and poison).
struct DeviceCase {
  DeviceTensor q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k;

  explicit DeviceCase(const HostCase& h) : host_args_(h.backward_args()), spec_(h.spec) {
    for (auto [dst, src] : {std::pair{&q, &h.q}, {&k, &h.k}, {&v, &h.v}, {&out, &h.out}, {&lse, &h.lse}})
      dst->upload(*src);
    if (spec_.with_backward)
      for (auto [dst, src] : {std::pair{&dout, &h.dout}, {&dq, &h.dq}, {&dk, &h.dk}, {&dv, &h.dv}})
        dst->upload(*src);
    if (spec_.varlen()) {
      cu_q.upload(h.cu_q);
      cu_k.upload(h.cu_k);
    }
  }

  // The case's arguments on the device tensors, on the CUDA backend with the spec's algorithm and
  // deterministic flag; lse only when the spec asks for it.
  AttentionArgs forward_args() const {
    AttentionArgs a = host_args_.fwd;
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    a.out = out.view();
    a.lse = spec_.with_lse ? lse.view() : TensorView{};
    if (spec_.varlen()) {
      a.cu_seqlens_q = cu_q.view();
      a.cu_seqlens_k = cu_k.view();
    }
    a.backend = Backend::kCUDA;
    return a;
  }
  BackwardArgs backward_args() const {
    BackwardArgs b = host_args_;
    b.fwd = forward_args();
    b.fwd.lse = lse.view();
    b.dout = dout.view();
    b.dq = dq.view();
    b.dk = dk.view();
    b.dv = dv.view();
    return b;
  }

  void download_forward(HostCase* h) const {
    out.download(&h->out);
    lse.download(&h->lse);
  }
  void download_gradients(HostCase* h) const {
    dq.download(&h->dq);
    dk.download(&h->dk);
    dv.download(&h->dv);
  }

 private:
  BackwardArgs host_args_;  // scalars of the call (scale, masks, algorithm); views replaced above
  CaseSpec spec_;
};

inline void expect_kernel(const RunInfo& info, const std::string& prefix) {
  EXPECT_EQ(info.kernel.rfind(prefix, 0), 0u) << info.kernel << " does not start with " << prefix;
}

// Runs the forward of `h` on the device, waits for it, checks that the kernel name starts with
// `kernel_prefix`, and downloads out and lse into `h`. Call under ASSERT_NO_FATAL_FAILURE.
inline void run_forward(HostCase* h, const std::string& kernel_prefix, RunInfo* info) {
  DeviceCase d(*h);
  const Status s = forward(d.forward_args(), info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_kernel(*info, kernel_prefix);
  d.download_forward(h);
}

// Runs the backward of `h` on the device into its poisoned gradients, checks the kernel name, downloads
// dq, dk, dv into `h` and compares each with the reference. Call under ASSERT_NO_FATAL_FAILURE.
inline void expect_backward_matches_reference(HostCase* h, const reference::Result& ref,
                                              const reference::Result& naive, const std::string& kernel_prefix) {
  DeviceCase d(*h);
  RunInfo info;
  const Status s = backward(d.backward_args(), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_kernel(info, kernel_prefix);
  d.download_gradients(h);
  const DType dtype = h->spec.dtype;
  expect_matches_reference("dq", h->dq, ref.dq, naive.dq, dtype, &std::cout);
  expect_matches_reference("dk", h->dk, ref.dk, naive.dk, dtype, &std::cout);
  expect_matches_reference("dv", h->dv, ref.dv, naive.dv, dtype, &std::cout);
}

}  // namespace flashattn::testing
