// Turning CUDA and cuBLAS error codes into Status, with the call that failed in the message.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "flashattn/types.h"

namespace flashattn::cuda {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  if (err == cudaErrorMemoryAllocation)
    return Status(StatusCode::kOutOfMemory, std::string(what) + ": " + cudaGetErrorString(err));
  return Status::Runtime(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace flashattn::cuda

// Evaluates a CUDA runtime call and returns its Status from the enclosing function on failure.
#define FA_CUDA_RETURN_IF_ERROR(call)                                            \
  do {                                                                           \
    ::flashattn::Status _fa_s = ::flashattn::cuda::cuda_status((call), #call);   \
    if (!_fa_s.ok()) return _fa_s;                                               \
  } while (0)

// After a kernel launch: the launch error, if any.
#define FA_CUDA_RETURN_IF_LAUNCH_ERROR(name) FA_CUDA_RETURN_IF_ERROR(cudaGetLastError())
