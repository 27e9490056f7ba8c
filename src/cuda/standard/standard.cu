// Placeholder until the standard kernels land: reports "not built".
#include "cuda/launch.h"

namespace flashattn::cuda {

Status standard_supports(const detail::Problem&, const Context&, std::string*) {
  return Status::NotSupported("algorithm standard: not built in this version of flashattn");
}
Status standard_forward(const detail::Problem&, const Context&) { return standard_supports({}, {}, nullptr); }
Status standard_backward(const detail::Problem&, const Context&) { return standard_supports({}, {}, nullptr); }

}  // namespace flashattn::cuda
