// Device copies of harness::HostTensor for the GPU suites, and the skip rule when no GPU is present.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "reference/harness.h"

namespace flashattn::testing {

// True when a CUDA device can be used; tests call FA_SKIP_WITHOUT_GPU() first.
inline bool gpu_present() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define FA_SKIP_WITHOUT_GPU() \
  if (!::flashattn::testing::gpu_present()) GTEST_SKIP() << "no CUDA device present: GPU test skipped"

// Owns device memory mirroring a host tensor's storage byte for byte (same strides and padding).
class DeviceTensor {
 public:
  DeviceTensor() = default;
  explicit DeviceTensor(const harness::HostTensor& host) { upload(host); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() {
    if (ptr_) cudaFree(ptr_);
  }

  void upload(const harness::HostTensor& host) {
    if (ptr_) cudaFree(ptr_);
    bytes_ = host.storage.size();
    ASSERT_EQ(cudaMalloc(&ptr_, bytes_ ? bytes_ : 1), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(ptr_, host.storage.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    view_ = host.view;
    view_.data = ptr_;
    view_.device = Device::kCUDA;
    view_.device_index = 0;
  }
  // Copies the device bytes back into `host` (which must have the same layout).
  void download(harness::HostTensor* host) const {
    ASSERT_EQ(host->storage.size(), bytes_);
    ASSERT_EQ(cudaMemcpy(host->storage.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  const TensorView& view() const { return view_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  TensorView view_;
};

}  // namespace flashattn::testing
