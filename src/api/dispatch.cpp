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
