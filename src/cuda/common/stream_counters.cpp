#include "cuda/common/stream_counters.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/common/cuda_check.h"

namespace flashattn::cuda {
namespace {

constexpr int64_t kMinCounters = 1024;  // the first array covers 1024 decode tiles: a 128 x 8-head batch

struct Counters {
  int* ptr = nullptr;
  int64_t count = 0;
};

std::mutex& pool_mutex() {
  static std::mutex m;
  return m;
}
// Never destroyed: the arrays live as long as the process (the CUDA context may be gone at static
// destruction, and freeing then would fail).
std::map<std::pair<int, uintptr_t>, Counters>& pool() {
  static auto* p = new std::map<std::pair<int, uintptr_t>, Counters>();
  return *p;
}

}  // namespace

Status stream_counters(int device, cudaStream_t stream, int64_t count, int** counters) {
  std::lock_guard<std::mutex> lock(pool_mutex());
  Counters& t = pool()[{device, reinterpret_cast<uintptr_t>(stream)}];
  if (t.count < count) {
    const int64_t n = std::max({count, 2 * t.count, kMinCounters});
    void* fresh = nullptr;
    FA_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&fresh, size_t(n) * sizeof(int), stream));
    const cudaError_t zeroed = cudaMemsetAsync(fresh, 0, size_t(n) * sizeof(int), stream);
    if (zeroed != cudaSuccess) {
      cudaFreeAsync(fresh, stream);
      return cuda_status(zeroed, "cudaMemsetAsync(stream counters)");
    }
    int* old = t.ptr;
    t.ptr = static_cast<int*>(fresh);
    t.count = n;
    // Kernels queued before this call still count on the old array: free it after them, on the stream.
    if (old != nullptr) FA_CUDA_RETURN_IF_ERROR(cudaFreeAsync(old, stream));
  }
  *counters = t.ptr;
  return Status::Ok();
}

Status launch_counters(int device, cudaStream_t stream, int64_t count, StreamBuffer* own, int** counters) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FA_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  if (capture == cudaStreamCaptureStatusNone) return stream_counters(device, stream, count, counters);
  Status s = own->allocate_zeroed(size_t(count) * sizeof(int));
  if (!s.ok()) return s;
  *counters = reinterpret_cast<int*>(own->at(0));
  return Status::Ok();
}

}  // namespace flashattn::cuda
