// Zero-at-rest int32 counters for kernels that count in global memory and put every counter back to zero
// before they finish: the decode kernel's arrival tickets (one per tile, reset by the tile's last CTA) and
// the fa3 forward's work queue (one counter, reset by the CTA that takes the last ticket). Kept per
// (device, stream) and reused by every later call on that stream, so a call needs no memset launch in
// front of its kernel; calls on different streams never share counters (they may run at the same time).
// Kernels on one stream run one after another, so they may all use the same array.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/stream_buffer.h"
#include "flashattn/types.h"

namespace flashattn::cuda {

// At least `count` zero-at-rest counters for kernels on `stream` of the current device `device`. Growing
// the stream's array allocates and zeroes a larger one on the stream and frees the old one stream-ordered,
// after the kernels already queued there. Not for streams being captured into a graph (the array would
// belong to the graph): launch_counters below handles that case.
Status stream_counters(int device, cudaStream_t stream, int64_t count, int** counters);

// `count` zeroed counters for one launch on `stream`: the stream's array above, or, on a stream being
// captured into a graph (where that array would be allocated inside the graph), `own`, allocated and
// zeroed on the stream for this launch. The kernel leaves them at zero either way.
Status launch_counters(int device, cudaStream_t stream, int64_t count, StreamBuffer* own, int** counters);

}  // namespace flashattn::cuda
