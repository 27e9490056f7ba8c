// A stream-ordered device allocation from the current device's workspace pool (workspace_pool.h; under
// graph capture, from the graph) that goes back on every way out of a launch sequence: kernels already
// queued on the stream keep it alive until they finish.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "cuda/common/cuda_check.h"
#include "cuda/common/workspace_pool.h"

namespace flashattn::cuda {

class StreamBuffer {
 public:
  explicit StreamBuffer(cudaStream_t stream) : stream_(stream) {}
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }

  // At least one byte is allocated, so the pointer is never null even for an empty workspace.
  // On a stream being captured into a graph the allocation belongs to the graph (an allocation node), and
  // no pool may be created during a capture: the stream's own stream-ordered allocator then.
  Status allocate(size_t bytes) {
    const size_t n = std::max<size_t>(bytes, 1);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    FA_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone) {
      FA_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&ptr_, n, stream_));
      return Status::Ok();
    }
    int device = 0;
    FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    cudaMemPool_t pool = nullptr;
    Status s = workspace_pool(device, &pool);
    if (!s.ok()) return s;
    FA_CUDA_RETURN_IF_ERROR(cudaMallocFromPoolAsync(&ptr_, n, pool, stream_));
    return Status::Ok();
  }
  Status allocate_zeroed(size_t bytes) {
    Status s = allocate(bytes);
    if (!s.ok()) return s;
    FA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ptr_, 0, std::max<size_t>(bytes, 1), stream_));
    return Status::Ok();
  }
  // Frees now (stream-ordered) and reports the error, instead of dropping it in the destructor.
  Status release() {
    void* p = ptr_;
    ptr_ = nullptr;
    if (p) FA_CUDA_RETURN_IF_ERROR(cudaFreeAsync(p, stream_));
    return Status::Ok();
  }

  char* at(size_t byte_offset) const { return static_cast<char*>(ptr_) + byte_offset; }
  float* floats(size_t float_offset = 0) const { return static_cast<float*>(ptr_) + float_offset; }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

}  // namespace flashattn::cuda
