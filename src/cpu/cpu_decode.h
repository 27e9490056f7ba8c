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

}  // namespace flashattn::detail::cpu
