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

// Whether a call with `tiles` tiles runs on the head dim's wide kernel (more warps per CTA, fewer CTAs per
// SM: wide_ctas_per_sm) instead of the 4-warp one: when its tiles fit one wave of the wide kernel. Then
// each split's CTA covers twice the keys with the same loads in flight per SM, so the call needs half
// the splits (fewer partial rows, a shorter merge) or none where the 4-warp kernel would cut every
// tile in two. More tiles than that fill the 4-warp kernel's slots better (half-size CTAs balance the SMs).
bool use_wide_kernel(int64_t tiles, int sm_count, int wide_ctas_per_sm);

// Whether a call of `tiles` tiles cut into `splits` splits each merges every tile's splits inside one thread
// block cluster (sm90, the wide kernel's cluster form): 2 to kMaxClusterSplits splits, and at least `tiles`
// clusters of `splits` CTAs fit on the device at once (cluster_capacity, from the occupancy query), so the
// call stays one wave. Clusters live in one GPC and the GPCs differ in SM count, so the capacity is often
// less than SMs / splits (an H100 with one CTA per SM: 7 clusters of 16, 15 of 8, 30 of 4, 66 of 2).
bool cluster_merge_fits(int64_t tiles, int64_t splits, int cluster_capacity);

// Query rows per KV head (group x seqlen_q) up to which an `auto` forward call without varlen runs on the
// split-KV kernel, as a KV-cache call on full caches (cuda::decode_takes_forward): one 16-row tile of it.
// There the query-tile kernels (fa3, fa2) leave most of a 64- to 192-row tile empty and walk every key of
// a KV head with one CTA, so a short batch runs on few SMs, while the split-KV kernel spreads the keys over
// all of them (measured on an H100: 6.3x at batch 1 x 32768 keys, level where fa3's tiles fill the GPU).
// With more rows each further row tile reads the keys again: 32 and 64 rows lost 6% and 39% against fa3
// where its packed tiles covered half the SMs, and gained 1.05-3.7x where they covered a quarter or less
// (docs/kvcache.md).
constexpr int64_t kForwardMaxRows = 16;
// Up to this many rows per KV head the route also holds while the (batch, KV head) pairs number at most a
// quarter of the SMs: each pair is then one tile of the query-tile kernels, which leave most SMs idle.
constexpr int64_t kForwardMaxRowsFewPairs = 64;
constexpr int kForwardPairsPerSmQuarter = 4;  // pairs * 4 <= SMs

// Whether a forward call with `rows` query rows per KV head and `pairs` (batch, KV head) pairs, on a device
// of sm_count SMs, takes the split-KV route by the two bounds above.
bool forward_rows_take_split_kv(int64_t rows, int64_t pairs, int sm_count);

}  // namespace flashattn::cuda::decode
