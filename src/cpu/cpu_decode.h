// KV-cache attention (decode, Flash-Decoding) on the CPU: append the new tokens, then split-KV attention
// with an LSE merge. The entry point is detail::cpu_forward_kvcache (api/backend.h).
#pragma once

#include <cstdint>

#include "api/kvcache_problem.h"

namespace flashattn::detail::cpu {

// Keys per split below which splitting stops paying: the partial results and the merge cost about as much
// as attending over this many keys.
constexpr int64_t kMinSplitKeys = 256;

// The split count the heuristic picks (num_splits == 0) for `workers` worker threads: enough
// (tile group x split) tasks to give every worker kDecodeTasksPerWorker of them, never chunks of fewer
// than kMinSplitKeys keys of the longest sequence, never more than kMaxKVSplits. Always >= 1.
int64_t heuristic_kv_splits(const KVCacheProblem& p, int workers);

// Tiles of at most this many stacked query rows take the products with the cache rows read in place
// (cache_rows.h) where the CPU runs an AVX-512 form of them: each K/V element then meets so few query rows
// that converting the block to fp32 first costs more than the products. Where the forward kernel's bf16 tile
// products run (bf16 and fp16 inputs, head_dim a multiple of 32, a CPU with AMX), only tiles of up to
// kInPlaceMaxRowsBesideTiles rows do, and larger ones take the tiles. The rest, and every tile on a CPU
// without AVX-512, gather each block into fp32 buffers for the fp32 tile products. (Measured on a 2-core
// Xeon with AMX: in place against fp32 blocks 1.15x at 16 rows, 0.87-0.95x at 32; against the bf16 tiles
// 1.9x at 1 row, 1.5x at 4, 1.05-1.15x at 8, 0.5-0.8x at 16.)
constexpr int64_t kInPlaceMaxRows = 16;
constexpr int64_t kInPlaceMaxRowsBesideTiles = 8;

// For tests: which path the decode kernel takes. kAuto: as above; kGathered: always the fp32 blocks;
// kInPlace: the in-place products wherever the rows allow, with the portable loops on a CPU without
// AVX-512; kTiles: the bf16 tiles wherever the forward kernel takes them (its portable emulation where
// override_bf16_products asks for it). Not thread-safe against running calls.
enum class DecodePath { kAuto, kGathered, kInPlace, kTiles };
void override_decode_path(DecodePath path);

}  // namespace flashattn::detail::cpu
