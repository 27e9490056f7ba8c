// Entry points: validate, pick the backend, and hand the Problem over.
#include <string>

#include "api/backend.h"
#include "api/kvcache_problem.h"
#include "api/problem.h"

#ifndef FLASHATTN_VERSION_STRING
#define FLASHATTN_VERSION_STRING "0.0.0"
#endif

namespace flashattn {
namespace detail {
namespace {

// The backend follows the memory the tensors live in; an explicit choice must agree with it.
Status resolve_backend(Device device, Backend* backend) {
  const Backend natural = device == Device::kCUDA ? Backend::kCUDA : Backend::kCPU;
  if (*backend == Backend::kAuto) {
    *backend = natural;
    return Status::Ok();
  }
  if (*backend != natural)
    return Status::Invalid(std::string("backend: ") + to_string(*backend) + " cannot run on tensors in " +
                           to_string(device) + " memory");
  return Status::Ok();
}

Status check(Problem* p, RunInfo* info) {
  Status s = resolve_backend(p->device, &p->backend);
  if (!s.ok()) return s;
  RunInfo local;
  RunInfo* out = info ? info : &local;
  out->backend = p->backend;
  return p->backend == Backend::kCPU ? cpu_check(*p, out) : cuda_check(*p, out);
}

}  // namespace
}  // namespace detail

Status check_supported(const AttentionArgs& args, RunInfo* info) {
  detail::Problem p;
  Status s = detail::make_problem(args, &p);
  return s.ok() ? detail::check(&p, info) : s;
}

Status check_supported(const BackwardArgs& args, RunInfo* info) {
  detail::Problem p;
  Status s = detail::make_problem(args, &p);
  return s.ok() ? detail::check(&p, info) : s;
}

Status forward(const AttentionArgs& args, RunInfo* info) {
  detail::Problem p;
  Status s = detail::make_problem(args, &p);
  if (!s.ok()) return s;
  RunInfo local;
  RunInfo* out = info ? info : &local;
  s = detail::check(&p, out);
  if (!s.ok()) return s;
  return p.backend == Backend::kCPU ? detail::cpu_forward(p, out) : detail::cuda_forward(p, out);
}

Status backward(const BackwardArgs& args, RunInfo* info) {
  detail::Problem p;
  Status s = detail::make_problem(args, &p);
  if (!s.ok()) return s;
  RunInfo local;
  RunInfo* out = info ? info : &local;
  s = detail::check(&p, out);
  if (!s.ok()) return s;
  return p.backend == Backend::kCPU ? detail::cpu_backward(p, out) : detail::cuda_backward(p, out);
}

const char* to_string(Fa3Ablation variant) {
  switch (variant) {
    case Fa3Ablation::kFull: return "full";
    case Fa3Ablation::kNoWarpSpecialization: return "no_warp_specialization";
    case Fa3Ablation::kNoPingPong: return "no_ping_pong";
    case Fa3Ablation::kNoIntraWarpgroupOverlap: return "no_intra_warpgroup_overlap";
  }
  return "unknown";
}

Status forward_fa3_ablation(const AttentionArgs& args, Fa3Ablation variant, RunInfo* info) {
  detail::Problem p;
  Status s = detail::make_problem(args, &p);
  if (s.ok()) s = detail::resolve_backend(p.device, &p.backend);
  if (!s.ok()) return s;
  switch (variant) {
    case Fa3Ablation::kFull:
    case Fa3Ablation::kNoWarpSpecialization:
    case Fa3Ablation::kNoPingPong:
    case Fa3Ablation::kNoIntraWarpgroupOverlap: break;
    default:
      return Status::Invalid("variant: " + std::to_string(static_cast<int>(variant)) +
                             " is not a Fa3Ablation value");
  }
  if (p.algorithm != Algorithm::kAuto && p.algorithm != Algorithm::kFA3)
    return Status::Invalid(std::string("algorithm: forward_fa3_ablation runs fa3 (or auto), not ") +
                           to_string(p.algorithm));
  // The variants exist only as CUDA kernels: a call that forward() would run on the cpu backend breaks
  // no rule of the arguments but asks for a configuration this entry point does not offer.
  if (p.backend != Backend::kCUDA)
    return Status::NotSupported(std::string("forward_fa3_ablation: runs on the cuda backend only; this call would run "
                                            "on backend ") +
                                to_string(p.backend) + " (tensors in " + to_string(p.device) + " memory)");
  p.algorithm = Algorithm::kFA3;
  RunInfo local;
  return detail::cuda_forward_fa3_ablation(p, static_cast<int>(variant), info ? info : &local);
}

Status forward_kvcache(const KVCacheArgs& args, RunInfo* info) {
  detail::KVCacheProblem p;
  Status s = detail::make_kvcache_problem(args, &p);
  if (!s.ok()) return s;
  s = detail::resolve_backend(p.device, &p.backend);
  if (!s.ok()) return s;
  RunInfo local;
  RunInfo* out = info ? info : &local;
  out->backend = p.backend;
  return p.backend == Backend::kCPU ? detail::cpu_forward_kvcache(p, out) : detail::cuda_forward_kvcache(p, out);
}

std::vector<Capabilities> capabilities() {
  std::vector<Capabilities> caps{detail::cpu_capabilities()};
  for (Capabilities& c : detail::cuda_capabilities()) caps.push_back(std::move(c));
  return caps;
}

bool cuda_built() { return detail::cuda_is_built(); }
int cuda_device_count() { return detail::cuda_devices(); }
const char* version() { return FLASHATTN_VERSION_STRING; }

}  // namespace flashattn
