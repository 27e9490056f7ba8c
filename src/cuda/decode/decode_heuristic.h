// How many splits the CUDA decode kernel cuts each tile's keys into when the caller leaves it open
// (num_splits = 0). CUDA-free, so the rule can be read and tested on its own.
#pragma once

#include <cstdint>

namespace flashattn::cuda::decode {

// Keys per split below which splitting stops paying on the GPU: each of a CTA's warps should get several
// 16-key blocks, or the fixed costs (ring fill, warp merge, partial rows, the merge) dominate the split.
constexpr int64_t kMinSplitKeysGpu = 256;

// The split count for `tiles` (batch x heads_kv x query-row tiles) tiles whose longest sequence has
// max_len_k keys, on sm_count SMs that each hold ctas_per_sm CTAs of the kernel. Always in [1, 128].
int64_t heuristic_splits(int64_t tiles, int64_t max_len_k, int sm_count, int ctas_per_sm);

}  // namespace flashattn::cuda::decode
