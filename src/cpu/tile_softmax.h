// The online-softmax step of one KV block for the stacked rows of a query tile, shared by the forward and
// the KV-cache kernels of the CPU backend.
#pragma once

#include <cstdint>

#include "core/mask.h"
#include "core/numeric.h"
#include "core/softmax_online.h"
#include "cpu/row_ops.h"
#include "cpu/tiling.h"

namespace flashattn::detail::cpu {

// s holds the m x kn scores of keys [k0, k0 + kn) (row stride bc), multiplied by the scale, and by log2(e)
// too unless softcap > 0; or, when score_scale != 1, still to be multiplied by score_scale (> 0, without
// softcap): the exponentials then fold that multiply in, with the same bits as a separate pass (the max
// of rounded products is the rounded product of the max). On return s holds the unnormalized probabilities P = exp2(s - max) of
// each row (0 at masked columns), each row's running max and sum are updated, and each row of the output
// accumulator o (row stride d) is rescaled when its max grew. per_row() runs once before each row (the
// forward kernel spreads its prefetches there).
template <typename PerRow>
inline void online_softmax_block(float* s, int64_t bc, int64_t m, int64_t kn, int64_t k0, const QueryTile& tile,
                                 const core::MaskSpec& mask, float softcap, float score_scale, float* o, int64_t d,
                                 core::OnlineSoftmaxRow* rows, PerRow&& per_row) {
  const bool full = mask.tile_fully_visible(tile.row_begin, tile.row_end(), k0, k0 + kn);
  for (int64_t r = 0; r < m; ++r) {
    per_row();
    float* srow = s + r * bc;
    ColumnRange cols{0, kn};
    if (!full) cols = visible_columns(mask, tile.row_begin + r % tile.rows, k0, kn);
    // Masked columns become P = 0 for the P V product; they never enter the max or the sum.
    fill_row(srow, cols.begin, 0.0f);
    fill_row(srow + cols.end, kn - cols.end, 0.0f);
    if (cols.empty()) continue;
    float* vis = srow + cols.begin;
    const int64_t nvis = cols.end - cols.begin;
    if (softcap > 0.0f)
      for (int64_t c = 0; c < nvis; ++c) vis[c] = core::apply_softcap(vis[c], softcap) * core::kLog2e;
    core::OnlineSoftmaxRow& state = rows[r];
    const float factor = state.begin_tile(row_max(vis, nvis) * score_scale);
    if (factor != 1.0f) scale_row(o + r * d, d, factor);
    state.add(score_scale == 1.0f ? exp2_shift_sum(vis, nvis, state.safe_max())
                                  : exp2_scale_shift_sum(vis, nvis, score_scale, state.safe_max()));
  }
}

}  // namespace flashattn::detail::cpu
