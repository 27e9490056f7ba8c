// The CUDA backend of a build without CUDA: every request says that the backend is not built.
#include "api/backend.h"

namespace flashattn::detail {

namespace {
Status not_built() { return Status::NotSupported("backend cuda: this build of flashattn has no CUDA kernels"); }
}  // namespace

bool cuda_is_built() { return false; }
int cuda_devices() { return 0; }
Status cuda_check(const Problem&, RunInfo*) { return not_built(); }
Status cuda_forward(const Problem&, RunInfo*) { return not_built(); }
Status cuda_backward(const Problem&, RunInfo*) { return not_built(); }
Status cuda_forward_fa3_ablation(const Problem&, int, RunInfo*) { return not_built(); }
Status cuda_forward_kvcache(const KVCacheProblem&, RunInfo*) { return not_built(); }
Status cuda_copy_index_to_host(const TensorView&, void*, std::vector<int32_t>*) { return not_built(); }
Status cuda_check_pointer(const char*, const void*, Device, int) { return Status::Ok(); }

std::vector<Capabilities> cuda_capabilities() {
  Capabilities c;
  c.backend = Backend::kCUDA;
  c.available = false;
  c.note = "not built (no CUDA toolkit at configure time)";
  return {c};
}

}  // namespace flashattn::detail
