// The memory pool the library's stream-ordered workspaces come from (StreamBuffer), one per device.
//
// cudaMallocAsync's default pool gives its free memory back to the driver at every synchronization (its
// release threshold is 0), so a call that follows a synchronization maps its workspace afresh. Measured on
// an H200: 150-200 us per fa2 backward call for its 128 MiB dQ accumulator (the sweep's shapes), 15-20% of
// the call at N 512. This pool keeps up to kWorkspacePoolKeepBytes of freed memory for the next call
// instead; larger workspaces than that are still mapped per call, where the kernels are long next to it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashattn/types.h"

namespace flashattn::cuda {

constexpr uint64_t kWorkspacePoolKeepBytes = uint64_t(512) << 20;

// The workspace pool of `device`, created on first use (thread-safe; it lives as long as the process).
// Fails where the device has no stream-ordered allocator.
Status workspace_pool(int device, cudaMemPool_t* pool);

}  // namespace flashattn::cuda
