// One cuBLAS handle per device, created on first use and reused by every `standard` call.
//
// A handle is not safe to share between threads that set different streams on it, so a lease holds the
// device's lock for as long as the caller enqueues work; the GPU work itself runs asynchronously after that.
#pragma once

#include <cublas_v2.h>

#include <mutex>

#include "flashattn/types.h"

namespace flashattn::cuda {

// Maps a cuBLAS status to Status, naming the call that failed.
Status cublas_status(cublasStatus_t status, const char* what);

class CublasLease {
 public:
  // Locks the handle of `device` (the current device) and binds it to `stream`.
  CublasLease(int device, cudaStream_t stream);
  CublasLease(const CublasLease&) = delete;
  CublasLease& operator=(const CublasLease&) = delete;

  // Not ok when the handle could not be created or bound; handle() is then null.
  const Status& status() const { return status_; }
  cublasHandle_t handle() const { return handle_; }

 private:
  std::unique_lock<std::mutex> lock_;
  cublasHandle_t handle_ = nullptr;
  Status status_;
};

}  // namespace flashattn::cuda

#define FA_CUBLAS_RETURN_IF_ERROR(call)                                          \
  do {                                                                           \
    ::flashattn::Status _fa_s = ::flashattn::cuda::cublas_status((call), #call); \
    if (!_fa_s.ok()) return _fa_s;                                              \
  } while (0)
