// Argument rules shared by the validation of every entry point (validate.cpp, validate_kvcache.cpp).
// Each returns a Status whose message names the argument and the rule it broke.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>

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

}  // namespace flashattn::detail

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define FA_RETURN_IF_ERROR(expr) \
  do {                           \
    ::flashattn::Status _fa_status = (expr); \
    if (!_fa_status.ok()) return _fa_status; \
  } while (0)
