// CUDA memory, event timing and device facts for the CLI; stubs that say "not built" without CUDA.
#include "device_buffers.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#ifdef FLASHATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashattn::cli {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int kCudaVersionMajorDivisor = 1000;  // CUDA encodes 13.0 as 13000
constexpr int kCudaVersionMinorDivisor = 10;

#ifdef FLASHATTN_WITH_CUDA
Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  const StatusCode code = err == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory : StatusCode::kRuntimeError;
  return Status(code, std::string(what) + ": " + cudaGetErrorString(err));
}
#else
Status not_built() { return Status::NotSupported("this build of the flashattn CLI has no CUDA runtime"); }
#endif

// The first dotted number of "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release
// Build ..." (the words before it vary between the open and the proprietary module).
std::string kernel_module_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!f || !std::getline(f, line)) return {};
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    const bool dotted_number = std::isdigit(static_cast<unsigned char>(word.front())) &&
                               word.find('.') != std::string::npos &&
                               word.find_first_not_of("0123456789.") == std::string::npos;
    if (dotted_number) return word;
  }
  return {};
}

}  // namespace

std::string driver_version() {
  std::string v = kernel_module_version();
  if (!v.empty()) return v;
  for (const GpuInfo& g : list_gpus()) {
    return "CUDA " + std::to_string(g.driver_api_version / kCudaVersionMajorDivisor) + "." +
           std::to_string(g.driver_api_version % kCudaVersionMajorDivisor / kCudaVersionMinorDivisor);
  }
  return "unknown";
}

#ifdef FLASHATTN_WITH_CUDA

bool gpu_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

std::vector<GpuInfo> list_gpus() {
  std::vector<GpuInfo> gpus;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return gpus;
  }
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    GpuInfo g;
    g.index = i;
    g.name = prop.name;
    g.cc_major = prop.major;
    g.cc_minor = prop.minor;
    g.sm_count = prop.multiProcessorCount;
    g.memory_gib = double(prop.totalGlobalMem) / kBytesPerGiB;
    g.runtime_version = runtime;
    g.driver_api_version = driver;
    gpus.push_back(g);
  }
  return gpus;
}

DeviceMirror::DeviceMirror(DeviceMirror&& other) noexcept { *this = std::move(other); }

DeviceMirror& DeviceMirror::operator=(DeviceMirror&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    view_ = other.view_;
  }
  return *this;
}

DeviceMirror::~DeviceMirror() { release(); }

void DeviceMirror::release() {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

Status DeviceMirror::upload(const harness::HostTensor& host, int device) {
  const size_t bytes = host.storage.size();
  if (ptr_ == nullptr || bytes != bytes_) {
    release();
    Status s = cuda_status(cudaSetDevice(device), "cudaSetDevice");
    if (!s.ok()) return s;
    // An empty tensor (an empty varlen batch) still gets a real pointer: absent views mean "not given".
    s = cuda_status(cudaMalloc(&ptr_, bytes > 0 ? bytes : 1), "cudaMalloc");
    if (!s.ok()) return s;
    bytes_ = bytes;
  }
  view_ = host.view;
  view_.data = ptr_;
  view_.device = Device::kCUDA;
  view_.device_index = device;
  return cuda_status(cudaMemcpy(ptr_, host.storage.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

Status DeviceMirror::download(harness::HostTensor* host) const {
  if (host->storage.size() != bytes_)
    return Status::Invalid("download: host tensor has " + std::to_string(host->storage.size()) +
                           " bytes, device copy " + std::to_string(bytes_));
  return cuda_status(cudaMemcpy(host->storage.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

DeviceAllocation::~DeviceAllocation() {
  if (ptr_) cudaFree(ptr_);
}

Status DeviceAllocation::allocate(size_t bytes, int device) {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  Status s = cuda_status(cudaSetDevice(device), "cudaSetDevice");
  if (!s.ok()) return s;
  s = cuda_status(cudaMalloc(&ptr_, bytes > 0 ? bytes : 1), "cudaMalloc");
  if (s.ok()) bytes_ = bytes;
  return s;
}

Status DeviceAllocation::copy_from_host(const void* src, size_t bytes) {
  if (bytes > bytes_) return Status::Invalid("copy_from_host: more bytes than allocated");
  return cuda_status(cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

Status gpu_synchronize() { return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

namespace {

// Owns a start/stop event pair.
class EventPair {
 public:
  EventPair() {
    ok_ = cudaEventCreate(&start_) == cudaSuccess && cudaEventCreate(&stop_) == cudaSuccess;
    if (!ok_) cudaGetLastError();
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  ~EventPair() {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
  }
  bool ok() const { return ok_; }
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  bool ok_ = false;
};

Status time_gpu(int warmup, int repeat, const std::function<Status()>& call, std::vector<double>* times_ms,
                double min_warmup_ms, GpuTiming mode) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point begin = Clock::now();
  Status s = Status::Ok();
  int64_t calls = 0;
  for (; calls < warmup; ++calls) {
    s = call();
    if (!s.ok()) return s;
  }
  // The sustained part: queue batches sized from the calls so far, so the GPU stays busy between syncs.
  constexpr int64_t kMaxBatch = 1 << 16;
  for (;;) {
    s = gpu_synchronize();
    if (!s.ok()) return s;
    const double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
    if (elapsed >= min_warmup_ms) break;
    const double per_call = calls > 0 ? elapsed / double(calls) : 0.0;
    const int64_t batch =
        per_call > 0 ? std::min<int64_t>(kMaxBatch, int64_t((min_warmup_ms - elapsed) / per_call) + 1) : 1;
    for (int64_t i = 0; i < batch; ++i, ++calls) {
      s = call();
      if (!s.ok()) return s;
    }
  }
  // kQueued: the timed calls are queued back to back, each between its own pair of events, before one
  // synchronization at the end (the way PyTorch's CUDA events and triton's do_bench time the peers): the
  // host prepares call i + 1 while the GPU runs call i, so each pair times the GPU's work. One untimed call
  // goes first, so that the first pair does not start on an idle GPU either. kEachAlone: every call waited
  // for, so each pair also holds the host's launch path while the GPU sits idle.
  std::unique_ptr<EventPair[]> pairs(new EventPair[size_t(std::max(repeat, 0))]);
  for (int i = 0; i < repeat; ++i)
    if (!pairs[size_t(i)].ok()) return Status::Runtime("cudaEventCreate failed");
  const bool queued = mode == GpuTiming::kQueued;
  if (queued && repeat > 0) {
    s = call();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < repeat; ++i) {
    const EventPair& e = pairs[size_t(i)];
    s = cuda_status(cudaEventRecord(e.start(), nullptr), "cudaEventRecord");
    if (!s.ok()) return s;
    s = call();
    if (!s.ok()) return s;
    s = cuda_status(cudaEventRecord(e.stop(), nullptr), "cudaEventRecord");
    if (!s.ok()) return s;
    if (!queued) {
      s = cuda_status(cudaEventSynchronize(e.stop()), "kernel execution");
      if (!s.ok()) return s;
    }
  }
  s = gpu_synchronize();
  if (!s.ok()) return s;
  for (int i = 0; i < repeat; ++i) {
    float ms = 0;
    s = cuda_status(cudaEventElapsedTime(&ms, pairs[size_t(i)].start(), pairs[size_t(i)].stop()),
                    "cudaEventElapsedTime");
    if (!s.ok()) return s;
    times_ms->push_back(double(ms));
  }
  return Status::Ok();
}

}  // namespace

#else  // !FLASHATTN_WITH_CUDA

bool gpu_present() { return false; }
std::vector<GpuInfo> list_gpus() { return {}; }

DeviceMirror::DeviceMirror(DeviceMirror&& other) noexcept { *this = std::move(other); }
DeviceMirror& DeviceMirror::operator=(DeviceMirror&& other) noexcept {
  view_ = other.view_;
  return *this;
}
DeviceMirror::~DeviceMirror() = default;
void DeviceMirror::release() {}
Status DeviceMirror::upload(const harness::HostTensor&, int) { return not_built(); }
Status DeviceMirror::download(harness::HostTensor*) const { return not_built(); }

DeviceAllocation::~DeviceAllocation() = default;
Status DeviceAllocation::allocate(size_t, int) { return not_built(); }
Status DeviceAllocation::copy_from_host(const void*, size_t) { return not_built(); }

Status gpu_synchronize() { return not_built(); }

namespace {
Status time_gpu(int, int, const std::function<Status()>&, std::vector<double>*, double, GpuTiming) {
  return not_built();
}
}  // namespace

#endif  // FLASHATTN_WITH_CUDA

Status time_calls(bool on_gpu, int warmup, int repeat, const std::function<Status()>& call,
                  std::vector<double>* times_ms, double min_warmup_ms, GpuTiming mode) {
  times_ms->clear();
  if (on_gpu) return time_gpu(warmup, repeat, call, times_ms, min_warmup_ms, mode);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point begin = Clock::now();
  for (int i = 0; i < warmup || std::chrono::duration<double, std::milli>(Clock::now() - begin).count() < min_warmup_ms;
       ++i) {
    Status s = call();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < repeat; ++i) {
    const Clock::time_point t0 = Clock::now();
    Status s = call();
    const Clock::time_point t1 = Clock::now();
    if (!s.ok()) return s;
    times_ms->push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return Status::Ok();
}

}  // namespace flashattn::cli
