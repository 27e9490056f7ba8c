// Placeholder until the fa1 kernels land: reports "not built".
#include "cuda/launch.h"

namespace flashattn::cuda {

Status fa1_supports(const detail::Problem&, const Context&, std::string*) {
  return Status::NotSupported("algorithm fa1: not built in this version of flashattn");
}
Status fa1_forward(const detail::Problem&, const Context&) { return fa1_supports({}, {}, nullptr); }
Status fa1_backward(const detail::Problem&, const Context&) { return fa1_supports({}, {}, nullptr); }

}  // namespace flashattn::cuda
