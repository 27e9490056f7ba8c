// The CUDA backend: device queries, pointer checks, and the choice of algorithm for a Problem.
#include <cuda_runtime.h>

#include <string>

#include "api/backend.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/unowned_rows.h"
#include "cuda/launch.h"

namespace flashattn::detail {
namespace {

// Makes `device` current for one call and restores the caller's current device afterwards: frameworks
// (torch on several GPUs) keep their own notion of the current device and do not expect a library to move it.
class DeviceGuard {
 public:
  DeviceGuard() {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// The device (checked against the devices present) and stream of one call, and the device's limits.
Status make_context(int device_index, void* stream, cuda::Context* ctx) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return Status::NotSupported("backend cuda: no CUDA device is present");
  }
  if (device_index < 0 || device_index >= count)
    return Status::Invalid("q: device index " + std::to_string(device_index) + " is out of range (" +
                           std::to_string(count) + " devices)");
  ctx->device = device_index;
  ctx->stream = static_cast<cudaStream_t>(stream);
  FA_CUDA_RETURN_IF_ERROR(cudaSetDevice(ctx->device));
  FA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, ctx->device));
  FA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&ctx->cc_major, cudaDevAttrComputeCapabilityMajor, ctx->device));
  FA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&ctx->cc_minor, cudaDevAttrComputeCapabilityMinor, ctx->device));
  int smem = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device));
  ctx->smem_optin = size_t(smem);
  return Status::Ok();
}

using SupportsFn = Status (*)(const Problem&, const cuda::Context&, std::string*);

// The algorithm `auto` resolves to: the fastest built one that accepts the problem.
Status resolve(const Problem& p, const cuda::Context& ctx, Algorithm* algo, std::string* kernel) {
  struct Entry {
    Algorithm algo;
    SupportsFn fwd;
    SupportsFn bwd;
  };
  static const Entry kEntries[] = {
      {Algorithm::kFA3, cuda::fa3_supports, cuda::fa3_supports},  // refuses backward problems
      {Algorithm::kFA2, cuda::fa2_supports, cuda::fa2_backward_supports},
      {Algorithm::kFA1, cuda::fa1_supports, cuda::fa1_supports},
      {Algorithm::kStandard, cuda::standard_supports, cuda::standard_supports},
  };
  // A forward call of few query rows per KV head: the split-KV kernel (reported as fa2, whose kernel
  // family it belongs to), see decode_takes_forward.
  if (*algo == Algorithm::kAuto) {
    KVCacheProblem kv;
    if (cuda::decode_takes_forward(p, ctx, &kv, kernel)) {
      *algo = Algorithm::kFA2;
      return Status::Ok();
    }
  }
  Status first_error;
  for (const Entry& e : kEntries) {
    if (*algo != Algorithm::kAuto && *algo != e.algo) continue;
    Status s = (p.backward ? e.bwd : e.fwd)(p, ctx, kernel);
    if (s.ok()) {
      *algo = e.algo;
      return s;
    }
    if (*algo != Algorithm::kAuto) return s;
    if (first_error.ok()) first_error = s;
  }
  return first_error.ok() ? Status::NotSupported("backend cuda: no algorithm accepts this problem") : first_error;
}

}  // namespace

bool cuda_is_built() { return true; }

int cuda_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

Status cuda_copy_index_to_host(const TensorView& t, void* stream, std::vector<int32_t>* out) {
  DeviceGuard guard;
  out->resize(size_t(t.shape[0]));
  FA_CUDA_RETURN_IF_ERROR(cudaSetDevice(t.device_index));
  // On the caller's stream: the offsets may have just been written there (a non-blocking stream would not
  // be ordered with a plain cudaMemcpy on the legacy default stream).
  auto s = static_cast<cudaStream_t>(stream);
  FA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(out->data(), t.data, out->size() * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  FA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return Status::Ok();
}

Status cuda_check_pointer(const char* name, const void* ptr, Device device, int device_index) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    attr.type = cudaMemoryTypeUnregistered;
  }
  const bool on_device = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  if (device == Device::kCUDA) {
    if (!on_device)
      return Status::Invalid(std::string(name) + ": declared as CUDA memory but the pointer is host memory");
    if (attr.type == cudaMemoryTypeDevice && attr.device != device_index)
      return Status::Invalid(std::string(name) + ": declared on cuda:" + std::to_string(device_index) +
                             " but the pointer belongs to cuda:" + std::to_string(attr.device));
  } else if (attr.type == cudaMemoryTypeDevice) {
    return Status::Invalid(std::string(name) + ": declared as CPU memory but the pointer is CUDA device memory");
  }
  return Status::Ok();
}

Status cuda_check(const Problem& p, RunInfo* info) {
  DeviceGuard guard;
  cuda::Context ctx;
  Status s = make_context(p.device_index, p.stream, &ctx);
  if (!s.ok()) return s;
  Algorithm algo = p.algorithm;
  std::string kernel;
  s = resolve(p, ctx, &algo, &kernel);
  if (!s.ok()) return s;
  info->backend = Backend::kCUDA;
  info->algorithm = algo;
  info->kernel = kernel;
  return Status::Ok();
}

Status cuda_forward(const Problem& p, RunInfo* info) {
  DeviceGuard guard;
  cuda::Context ctx;
  Status s = make_context(p.device_index, p.stream, &ctx);
  if (!s.ok()) return s;
  // `auto` resolved to fa2 may be the split-KV route (resolve); no other resolution can be.
  KVCacheProblem kv;
  if (info->algorithm == Algorithm::kFA2 && cuda::decode_takes_forward(p, ctx, &kv, nullptr))
    return cuda::decode_forward(kv, ctx);
  switch (info->algorithm) {
    case Algorithm::kStandard: return cuda::standard_forward(p, ctx);
    case Algorithm::kFA1: return cuda::fa1_forward(p, ctx);
    // The tile kernels walk the rows of sequences only: the packed rows after the last one are written apart
    // (standard and fa1's finalize pass write them themselves).
    case Algorithm::kFA2: s = cuda::fa2_forward(p, ctx); break;
    case Algorithm::kFA3: s = cuda::fa3_forward(p, ctx); break;
    default: return Status::NotSupported(std::string("algorithm ") + to_string(info->algorithm) + ": not built");
  }
  return s.ok() ? cuda::write_unowned_forward_rows(p, ctx) : s;
}

Status cuda_backward(const Problem& p, RunInfo* info) {
  DeviceGuard guard;
  cuda::Context ctx;
  Status s = make_context(p.device_index, p.stream, &ctx);
  if (!s.ok()) return s;
  switch (info->algorithm) {
    case Algorithm::kStandard: return cuda::standard_backward(p, ctx);
    // As in the forward: the packed rows after the last sequence are written apart (standard writes its own).
    case Algorithm::kFA1: s = cuda::fa1_backward(p, ctx); break;
    case Algorithm::kFA2: s = cuda::fa2_backward(p, ctx); break;
    default: return Status::NotSupported(std::string("algorithm ") + to_string(info->algorithm) + ": not built");
  }
  return s.ok() ? cuda::write_unowned_backward_rows(p, ctx) : s;
}

// The public variant is handed to the kernel's own enum by value: both must list the variants in one order.
static_assert(int(cuda::Fa3Variant::kFull) == int(Fa3Ablation::kFull) &&
                  int(cuda::Fa3Variant::kNoWarpSpecialization) == int(Fa3Ablation::kNoWarpSpecialization) &&
                  int(cuda::Fa3Variant::kNoPingPong) == int(Fa3Ablation::kNoPingPong) &&
                  int(cuda::Fa3Variant::kNoIntraWarpgroupOverlap) == int(Fa3Ablation::kNoIntraWarpgroupOverlap),
              "cuda::Fa3Variant and Fa3Ablation must number the variants alike");

Status cuda_forward_fa3_ablation(const Problem& p, int variant, RunInfo* info) {
  DeviceGuard guard;
  cuda::Context ctx;
  Status s = make_context(p.device_index, p.stream, &ctx);
  if (!s.ok()) return s;
  std::string kernel;
  s = cuda::fa3_supports(p, ctx, &kernel, static_cast<cuda::Fa3Variant>(variant));
  if (!s.ok()) return s;
  const auto v = static_cast<Fa3Ablation>(variant);
  info->backend = Backend::kCUDA;
  info->algorithm = Algorithm::kFA3;
  // A variant's name adds which overlap it compiles out to the tile shape fa3_supports names.
  info->kernel = v == Fa3Ablation::kFull ? kernel : kernel + "_" + to_string(v);
  s = cuda::fa3_forward(p, ctx, static_cast<cuda::Fa3Variant>(variant));
  return s.ok() ? cuda::write_unowned_forward_rows(p, ctx) : s;
}

Status cuda_forward_kvcache(const KVCacheProblem& p, RunInfo* info) {
  DeviceGuard guard;
  cuda::Context ctx;
  Status s = make_context(p.device_index, p.stream, &ctx);
  if (!s.ok()) return s;
  // decode_forward checks the kernel's limits before the append (a refusal leaves the caches untouched) and
  // names the kernel from the plan it launches, so the call is planned once.
  std::string kernel;
  s = cuda::decode_forward(p, ctx, &kernel);
  if (info && !kernel.empty()) {
    info->backend = Backend::kCUDA;
    info->algorithm = Algorithm::kFA2;
    info->kernel = kernel;
  }
  return s;
}

std::vector<Capabilities> cuda_capabilities() {
  const int devices = cuda_devices();
  const std::string note = devices > 0 ? std::to_string(devices) + " CUDA device(s)" : "no CUDA device present";
  auto make = [&](Algorithm algo, std::vector<int> head_dims, int max_hd) {
    Capabilities c;
    c.backend = Backend::kCUDA;
    c.algorithm = algo;
    c.available = devices > 0;
    c.note = note;
    c.dtypes = {DType::kFloat16, DType::kBFloat16};
    c.head_dims = std::move(head_dims);
    c.max_head_dim = max_hd;
    c.backward = c.causal = c.window = c.softcap = c.gqa = c.varlen = true;
    return c;
  };
  // fa3: forward only, where the build has sm_90a code and the device is compute capability 9.0 (device 0).
  Capabilities fa3 = make(Algorithm::kFA3, {64, 128, 256}, 256);
  fa3.backward = false;
  int major = 0, minor = 0;
  if (devices > 0 && (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
                      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess))
    cudaGetLastError();
  std::string why;
  if (devices > 0 && !cuda::fa3_runs_on(major, minor, &why)) {
    fa3.available = false;
    fa3.note = why;
  }
  return {fa3, make(Algorithm::kFA2, {64, 96, 128, 192, 256}, 256), make(Algorithm::kFA1, {}, 128),
          make(Algorithm::kStandard, {}, 256)};
}

}  // namespace flashattn::detail
