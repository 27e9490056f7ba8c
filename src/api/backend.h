// The interface between the API layer and the backends. Each backend checks whether it handles a
// validated Problem (and which kernel it would run) before it is asked to run it.
#pragma once

#include <cstdint>
#include <vector>

#include "api/kvcache_problem.h"
#include "api/problem.h"

namespace flashattn::detail {

// CPU backend (src/cpu).
Status cpu_check(const Problem& p, RunInfo* info);
Status cpu_forward(const Problem& p, RunInfo* info);
Status cpu_backward(const Problem& p, RunInfo* info);
Capabilities cpu_capabilities();
// KV-cache (decode): checks the backend's limits before anything is written, then appends and attends.
Status cpu_forward_kvcache(const KVCacheProblem& p, RunInfo* info);

// CUDA backend (src/cuda); stubs that report "not built" when the library has no CUDA.
bool cuda_is_built();
int cuda_devices();
Status cuda_check(const Problem& p, RunInfo* info);
Status cuda_forward(const Problem& p, RunInfo* info);
Status cuda_backward(const Problem& p, RunInfo* info);
// The fa3 forward with one overlap compiled out (`variant` is a Fa3Ablation value, checked by the caller);
// NotSupported where fa3 does not take the problem. Fills info as cuda_check would for algorithm fa3.
Status cuda_forward_fa3_ablation(const Problem& p, int variant, RunInfo* info);
std::vector<Capabilities> cuda_capabilities();
// KV-cache (decode) on the GPU: checks the kernel's limits before anything is written, then appends and attends.
Status cuda_forward_kvcache(const KVCacheProblem& p, RunInfo* info);
// Copies a small int32 index tensor in device memory to the host (for validating varlen offsets).
Status cuda_copy_index_to_host(const TensorView& t, void* stream, std::vector<int32_t>* out);
// Checks that `ptr` is memory of the given kind (device memory of device_index, or host memory).
Status cuda_check_pointer(const char* name, const void* ptr, Device device, int device_index);

}  // namespace flashattn::detail
