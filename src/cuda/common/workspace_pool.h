// The memory pool the library's stream-ordered workspaces come from (StreamBuffer), one per device.
//
// cudaMallocAsync's default pool gives its free memory back to the driver at every synchronization (its
// release threshold is 0), so a call that follows a synchronization maps its workspace afresh. Measured on
// an H200 (bench/results/h200-20261202-workspace-pool/): a synchronized fa2 backward call with its 128 MiB
// dQ accumulator took 150-280 us longer than the same call queued behind another (15-25% of the call at
// N 512); from this pool 0-7 us. The pool keeps up to kWorkspacePoolKeepBytes of freed memory for the next
// call; larger workspaces than that are still mapped per call, where the kernels are long next to it.
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
