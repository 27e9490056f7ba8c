// CUDA memory, timing and device facts for the CLI. Every function compiles without CUDA too: then it
// reports (as a Status, or an empty list) that this build has no CUDA, so the subcommands need no #ifdefs.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "flashattn/types.h"
#include "reference/harness.h"

namespace flashattn::cli {

// True when the CLI was built with the CUDA runtime and at least one device answers.
bool gpu_present();

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  double memory_gib = 0;
  int runtime_version = 0;  // e.g. 13000 for CUDA 13.0
  int driver_api_version = 0;
};
std::vector<GpuInfo> list_gpus();
// The kernel driver's version ("580.65.06") from /proc/driver/nvidia/version, else the CUDA driver API
// version ("CUDA 13.0"), else "unknown".
std::string driver_version();

// Device memory that mirrors a host tensor byte for byte: same strides, same padding, so the host view's
// strides stay valid and a download lands every element (and the poison in the padding) back in place.
class DeviceMirror {
 public:
  DeviceMirror() = default;
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  DeviceMirror(DeviceMirror&& other) noexcept;
  DeviceMirror& operator=(DeviceMirror&& other) noexcept;
  ~DeviceMirror();

  // Allocates (once) and copies the host bytes to the device.
  Status upload(const harness::HostTensor& host, int device);
  // Copies the device bytes back into `host`, which must be the tensor uploaded (same size).
  Status download(harness::HostTensor* host) const;
  // The host tensor's view re-pointed at device memory.
  const TensorView& view() const { return view_; }

 private:
  void release();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  TensorView view_;
};

// A plain device allocation (the GPU benchmark views one buffer under many shapes).
class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  ~DeviceAllocation();
  Status allocate(size_t bytes, int device);
  // Copies `bytes` from host memory to the start of the allocation.
  Status copy_from_host(const void* src, size_t bytes);
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Times `call` `repeat` times after `warmup` untimed calls and returns each timed call's milliseconds.
// On the GPU every timed call is bracketed by its own CUDA events on the default stream (the stream the CLI
// passes to the library), by default all of them queued back to back before one synchronization, so that
// the host's work for the next call overlaps the GPU's for this one (the rate of calls in a stream); with
// GpuTiming::kEachAlone each call starts on an idle GPU and is waited for before the next (the latency of
// one call, its host-side launch path included). On the CPU by a steady clock. With min_warmup_ms > 0 the untimed calls go on until they
// have also taken that long (wall clock, GPU work included): a GPU at its power limit lowers its clock
// within about a tenth of a second of sustained load, so every measurement then sees the clock the
// kernel itself settles at, whatever ran before it. Stops at the first call that returns an error.
enum class GpuTiming { kQueued, kEachAlone };
Status time_calls(bool on_gpu, int warmup, int repeat, const std::function<Status()>& call,
                  std::vector<double>* times_ms, double min_warmup_ms = 0, GpuTiming mode = GpuTiming::kQueued);

// Waits for all work on the current device and reports any asynchronous kernel error.
Status gpu_synchronize();

}  // namespace flashattn::cli
