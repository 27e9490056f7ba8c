// Names, sizes and helpers of the public value types.
#include <string>

#include "flashattn/attention.h"
#include "flashattn/types.h"

namespace flashattn {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "fp32";
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat8E4M3: return "fp8_e4m3";
    case DType::kInt32: return "int32";
  }
  return "unknown";
}

const char* to_string(Device device) {
  switch (device) {
    case Device::kCPU: return "cpu";
    case Device::kCUDA: return "cuda";
  }
  return "unknown";
}

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat8E4M3: return 1;
    case DType::kInt32: return 4;
  }
  return 1;
}

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotSupported: return "not supported";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kRuntimeError: return "runtime error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(flashattn::to_string(code_)) + ": " + message_;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  if (numel() == 0) return true;  // no element to be out of place
  int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] > 1 && stride[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

TensorView TensorView::contiguous(void* data, DType dtype, int ndim, const int64_t* shape, Device device,
                                  int device_index) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_index = device_index;
  t.ndim = ndim < 0 ? 0 : (ndim > kMaxDims ? kMaxDims : ndim);
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.stride[i] = stride;
    stride *= shape[i];
  }
  return t;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device,
                                  int device_index) {
  return contiguous(data, dtype, int(shape.size()), shape.begin(), device, device_index);
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kAuto: return "auto";
    case Backend::kCPU: return "cpu";
    case Backend::kCUDA: return "cuda";
  }
  return "unknown";
}

const char* to_string(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kStandard: return "standard";
    case Algorithm::kFA1: return "fa1";
    case Algorithm::kFA2: return "fa2";
    case Algorithm::kFA3: return "fa3";
  }
  return "unknown";
}

bool parse_backend(const std::string& name, Backend* backend) {
  for (Backend b : {Backend::kAuto, Backend::kCPU, Backend::kCUDA}) {
    if (name == to_string(b)) {
      *backend = b;
      return true;
    }
  }
  return false;
}

bool parse_algorithm(const std::string& name, Algorithm* algorithm) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kStandard, Algorithm::kFA1, Algorithm::kFA2, Algorithm::kFA3}) {
    if (name == to_string(a)) {
      *algorithm = a;
      return true;
    }
  }
  return false;
}

}  // namespace flashattn
