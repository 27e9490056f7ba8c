// Argument rules shared by the validation of every entry point.
#include "api/validate_rules.h"

#include <cmath>

#include "api/backend.h"

namespace flashattn::detail {

std::string shape_str(const TensorView& t) {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < t.ndim; ++i) s << (i ? ", " : "") << t.shape[i];
  s << "]";
  return s.str();
}

Status check_tensor(const char* name, const TensorView& t, int expected_ndim) {
  if (!t.present()) return invalid(name, ": is required but absent (data is null)");
  if (t.ndim != expected_ndim)
    return invalid(name, ": expected ", expected_ndim, " dimensions, got ", t.ndim, " (shape ", shape_str(t), ")");
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return invalid(name, ": dimension ", i, " has negative size ", t.shape[i]);
    if (t.stride[i] < 0) return invalid(name, ": dimension ", i, " has negative stride ", t.stride[i]);
  }
  // Only a view with elements has a layout; an empty one (numpy reports strides of 0) is never addressed.
  if (t.numel() > 0 && t.shape[t.ndim - 1] > 1 && t.stride[t.ndim - 1] != 1)
    return invalid(name, ": the last dimension must be contiguous (stride 1), got stride ", t.stride[t.ndim - 1]);
  if (t.dtype != DType::kFloat32 && t.dtype != DType::kFloat16 && t.dtype != DType::kBFloat16 &&
      t.dtype != DType::kFloat8E4M3 && t.dtype != DType::kInt32)
    return invalid(name, ": unknown dtype code ", int(t.dtype));
  if (t.device != Device::kCPU && t.device != Device::kCUDA)
    return invalid(name, ": unknown device code ", int(t.device));
  if (reinterpret_cast<uintptr_t>(t.data) % uintptr_t(dtype_size(t.dtype)) != 0)
    return invalid(name, ": data pointer is not aligned to its element size (", dtype_size(t.dtype), " bytes)");
  return Status::Ok();
}

Status check_same_shape(const char* name, const TensorView& t, const char* ref_name, const TensorView& ref) {
  bool same = t.ndim == ref.ndim;
  for (int i = 0; same && i < t.ndim; ++i) same = t.shape[i] == ref.shape[i];
  if (!same) return invalid(name, ": shape ", shape_str(t), " must equal the shape of ", ref_name, " ", shape_str(ref));
  return Status::Ok();
}

Status check_same_place(const char* name, const TensorView& t, const TensorView& q) {
  if (t.device != q.device || (t.device == Device::kCUDA && t.device_index != q.device_index))
    return invalid(name, ": lives on ", to_string(t.device), ":", t.device_index, " but q lives on ",
                   to_string(q.device), ":", q.device_index, "; all tensors must share one device");
  return Status::Ok();
}

Status check_same_dtype(const char* name, const TensorView& t, const TensorView& q) {
  if (t.dtype != q.dtype)
    return invalid(name, ": dtype ", to_string(t.dtype), " must equal the dtype of q (", to_string(q.dtype), ")");
  return Status::Ok();
}

Status check_shape(const char* name, const TensorView& t, std::initializer_list<int64_t> want, const char* meaning) {
  bool same = t.ndim == int(want.size());
  int i = 0;
  for (int64_t w : want) same = same && t.shape[i++] == w;
  if (!same) {
    std::ostringstream s;
    s << "[";
    i = 0;
    for (int64_t w : want) s << (i++ ? ", " : "") << w;
    s << "]";
    return invalid(name, ": shape ", shape_str(t), " must be ", s.str(), " (", meaning, ")");
  }
  return Status::Ok();
}

Status check_softmax_values(float softmax_scale, float softcap, int64_t window_left, int64_t window_right,
                            int64_t head_dim, float* scale) {
  if (!std::isfinite(softmax_scale)) return invalid("softmax_scale: must be finite, got ", softmax_scale);
  *scale = softmax_scale != 0.0f ? softmax_scale : 1.0f / std::sqrt(float(head_dim));
  if (!std::isfinite(softcap) || softcap < 0.0f)
    return invalid("softcap: must be finite and >= 0 (0 = off), got ", softcap);
  if (window_left < -1) return invalid("window_left: must be >= 0, or -1 for unbounded, got ", window_left);
  if (window_right < -1) return invalid("window_right: must be >= 0, or -1 for unbounded, got ", window_right);
  return Status::Ok();
}

Status check_execution_values(Backend backend, Algorithm algorithm, int num_threads) {
  if (backend != Backend::kAuto && backend != Backend::kCPU && backend != Backend::kCUDA)
    return invalid("backend: unknown backend code ", int(backend));
  if (int(algorithm) < 0 || int(algorithm) > int(Algorithm::kFA3))
    return invalid("algorithm: unknown algorithm code ", int(algorithm));
  if (num_threads < 0) return invalid("num_threads: must be >= 0 (0 = all hardware threads), got ", num_threads);
  return Status::Ok();
}

Status check_locations(std::initializer_list<std::pair<const char*, const TensorView*>> tensors) {
  if (!cuda_is_built()) return Status::Ok();
  for (const auto& [name, t] : tensors) {
    // A view without elements is never read or written: frameworks give it no storage (a null or placeholder
    // address), so where it lives is not checked.
    if (!t->present() || t->numel() == 0) continue;
    FA_RETURN_IF_ERROR(cuda_check_pointer(name, t->data, t->device, t->device_index));
  }
  return Status::Ok();
}

}  // namespace flashattn::detail
