// Argument rules shared by the validation of every entry point (validate.cpp, validate_kvcache.cpp).
// Each returns a Status whose message names the argument and the rule it broke.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>

#include "flashattn/attention.h"
#include "flashattn/types.h"

namespace flashattn::detail {

// "[2, 128, 8, 64]"
std::string shape_str(const TensorView& t);

// Status::Invalid with the parts streamed into one message.
template <typename... Parts>
Status invalid(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return Status::Invalid(s.str());
}

// Rules every tensor argument obeys: present, `expected_ndim` dims, non-negative sizes and strides, last dim
// contiguous, known dtype and device codes, data aligned to the element size.
Status check_tensor(const char* name, const TensorView& t, int expected_ndim);
// t has exactly the shape of ref.
Status check_same_shape(const char* name, const TensorView& t, const char* ref_name, const TensorView& ref);
// t has exactly the shape `want`; `meaning` spells it out ("[batch, heads_q, seqlen_q]").
Status check_shape(const char* name, const TensorView& t, std::initializer_list<int64_t> want, const char* meaning);
// t lives on the same device as q.
Status check_same_place(const char* name, const TensorView& t, const TensorView& q);
// t has the dtype of q.
Status check_same_dtype(const char* name, const TensorView& t, const TensorView& q);

// The softmax options every call carries (softmax_scale, softcap, window_left, window_right); on success
// *scale is the resolved scale (0 means 1 / sqrt(head_dim)). Args: AttentionArgs or KVCacheArgs.
template <typename Args>
Status check_softmax_options(const Args& a, int64_t head_dim, float* scale);

// The execution options every call carries: known backend and algorithm codes, num_threads >= 0.
template <typename Args>
Status check_execution_options(const Args& a);

// Checks that every present pointer of a view with elements is memory of its declared kind (only possible where
// CUDA is built).
Status check_locations(std::initializer_list<std::pair<const char*, const TensorView*>> tensors);

}  // namespace flashattn::detail

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define FA_RETURN_IF_ERROR(expr) \
  do {                           \
    ::flashattn::Status _fa_status = (expr); \
    if (!_fa_status.ok()) return _fa_status; \
  } while (0)

namespace flashattn::detail {

Status check_softmax_values(float softmax_scale, float softcap, int64_t window_left, int64_t window_right,
                            int64_t head_dim, float* scale);
Status check_execution_values(Backend backend, Algorithm algorithm, int num_threads);

template <typename Args>
Status check_softmax_options(const Args& a, int64_t head_dim, float* scale) {
  return check_softmax_values(a.softmax_scale, a.softcap, a.window_left, a.window_right, head_dim, scale);
}

template <typename Args>
Status check_execution_options(const Args& a) {
  return check_execution_values(a.backend, a.algorithm, a.num_threads);
}

}  // namespace flashattn::detail
