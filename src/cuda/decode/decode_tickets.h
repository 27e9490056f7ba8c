// Arrival tickets of the decode kernel's in-kernel merge: int32 counters, one per tile, that are zero at
// rest because the last CTA of every tile resets its own. Kept per (device, stream) and reused by every
// later call on that stream, so a call needs no memset launch in front of its kernel; calls on different
// streams never share counters (they may run at the same time).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashattn/types.h"

namespace flashattn::cuda::decode {

// At least `count` zero-at-rest counters for kernels on `stream` of the current device `device`. Growing
// the stream's array allocates and zeroes a larger one on the stream and frees the old one stream-ordered,
// after the kernels already queued there. Not for streams being captured into a graph (the array would
// belong to the graph): the caller then takes zeroed workspace instead.
Status stream_tickets(int device, cudaStream_t stream, int64_t count, int** tickets);

}  // namespace flashattn::cuda::decode
