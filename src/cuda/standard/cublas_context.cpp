#include "cuda/standard/cublas_context.h"

#include <memory>
#include <string>
#include <vector>

namespace flashattn::cuda {
namespace {

struct DeviceHandle {
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
};

// Handles live for the whole process on purpose: destroying them from a static destructor can run after
// the CUDA runtime has shut down, which crashes at exit.
DeviceHandle& slot(int device) {
  static std::mutex table_mutex;
  static std::vector<std::unique_ptr<DeviceHandle>> table;
  std::lock_guard<std::mutex> guard(table_mutex);
  if (size_t(device) >= table.size()) table.resize(size_t(device) + 1);
  if (!table[size_t(device)]) table[size_t(device)] = std::make_unique<DeviceHandle>();
  return *table[size_t(device)];
}

}  // namespace

Status cublas_status(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  std::string msg = std::string(what) + ": " + cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")";
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return Status(StatusCode::kOutOfMemory, msg);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH)
    return Status::NotSupported(msg);
  return Status::Runtime(msg);
}

CublasLease::CublasLease(int device, cudaStream_t stream) {
  DeviceHandle& h = slot(device);
  lock_ = std::unique_lock<std::mutex>(h.mutex);
  if (!h.handle) {
    status_ = cublas_status(cublasCreate(&h.handle), "cublasCreate");
    if (!status_.ok()) {
      h.handle = nullptr;
      return;
    }
  }
  status_ = cublas_status(cublasSetStream(h.handle, stream), "cublasSetStream");
  if (status_.ok()) handle_ = h.handle;
}

}  // namespace flashattn::cuda
