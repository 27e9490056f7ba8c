#include "cuda/decode/decode_heuristic.h"

#include <algorithm>

#include "cuda/decode/decode_config.cuh"

namespace flashattn::cuda::decode {

// Decode is memory-bound: the kernel runs at the HBM rate only when every SM holds its full complement of
// CTAs (each keeps its own loads in flight) for the whole kernel. With `slots` = SMs x CTAs per SM:
// - tiles >= slots: the tiles alone fill the machine; splitting would only add partial rows and merges.
// - otherwise each tile is cut into floor(slots / tiles) splits, so that tiles x splits fills one wave
//   without starting a second one (a second, partial wave would run at a fraction of the bandwidth and
//   take as long as a full one). Batch 1 with 8 KV heads on 132 SMs x 2 CTAs: 33 splits, 264 CTAs.
// - never chunks of fewer than kMinSplitKeysGpu keys of the longest sequence (the kernel limits shorter
//   sequences again per tile), and never more than kMaxSplits.
int64_t heuristic_splits(int64_t tiles, int64_t max_len_k, int sm_count, int ctas_per_sm) {
  const int64_t slots = int64_t(std::max(1, sm_count)) * std::max(1, ctas_per_sm);
  if (tiles <= 0 || tiles >= slots) return 1;
  const int64_t by_slots = slots / tiles;
  const int64_t by_length = max_len_k / kMinSplitKeysGpu;
  return std::max<int64_t>(1, std::min({by_slots, by_length, int64_t(kMaxSplits)}));
}

bool use_wide_kernel(int64_t tiles, int sm_count, int wide_ctas_per_sm) {
  return wide_ctas_per_sm > 0 && tiles > 0 && tiles <= int64_t(std::max(1, sm_count)) * wide_ctas_per_sm;
}

bool cluster_merge_fits(int64_t tiles, int64_t splits, int cluster_capacity) {
  return splits > 1 && splits <= kMaxClusterSplits && tiles > 0 && int64_t(cluster_capacity) >= tiles;
}

bool forward_rows_take_split_kv(int64_t rows, int64_t pairs, int sm_count) {
  const bool few_pairs = pairs * kForwardPairsPerSmQuarter <= int64_t(std::max(1, sm_count));
  return rows > 0 && rows <= (few_pairs ? kForwardMaxRowsFewPairs : kForwardMaxRows);
}

}  // namespace flashattn::cuda::decode
