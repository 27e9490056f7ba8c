// Plain value types of the public API: element types, tensor views and the Status every call returns.
#pragma once

#include <cstdint>
#include <string>

namespace flashattn {

// Element types. Index tensors (cu_seqlens, block tables) are kInt32.
enum class DType : int {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat8E4M3 = 3,  // reserved for fp8 kernels; no backend accepts it yet
  kInt32 = 4,
};

enum class Device : int {
  kCPU = 0,
  kCUDA = 1,
};

const char* to_string(DType dtype);
const char* to_string(Device device);
int64_t dtype_size(DType dtype);

// A non-owning view of a strided tensor. Strides are in elements, not bytes. A view with data == nullptr
// is "absent" (for optional arguments such as lse or cu_seqlens). The strides of a view without elements
// address nothing and are not checked (frameworks report any value there, numpy zeros).
struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device = Device::kCPU;
  int device_index = 0;
  int ndim = 0;
  int64_t shape[kMaxDims] = {0, 0, 0, 0};
  int64_t stride[kMaxDims] = {0, 0, 0, 0};

  bool present() const { return data != nullptr; }
  int64_t numel() const;
  bool is_contiguous() const;

  // A row-major contiguous view of `ndim` dims (1..4).
  static TensorView contiguous(void* data, DType dtype, int ndim, const int64_t* shape,
                               Device device = Device::kCPU, int device_index = 0);
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCPU, int device_index = 0);
};

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // the call breaks a rule of the API (shape, stride, dtype, range)
  kNotSupported = 2,     // valid, but no built kernel of the chosen backend handles it
  kOutOfMemory = 3,
  kRuntimeError = 4,     // the device or a library reported an error
};

const char* to_string(StatusCode code);

// The result of every entry point. The message names the argument and the rule it broke.
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status Invalid(std::string message) { return {StatusCode::kInvalidArgument, std::move(message)}; }
  static Status NotSupported(std::string message) { return {StatusCode::kNotSupported, std::move(message)}; }
  static Status Runtime(std::string message) { return {StatusCode::kRuntimeError, std::move(message)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: q: head_dim 300 > 256 ..."; "ok" when ok.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace flashattn
