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

// Where a block's probabilities go. ProbabilitiesInPlace: over the scores, as fp32 (0 at masked columns),
// for the fp32 P V product. The exponentials run in the documented 8-lane order of row_ops.h.
class ProbabilitiesInPlace {
 public:
  ProbabilitiesInPlace(float* s, int64_t lds, int64_t kn) : s_(s), lds_(lds), kn_(kn) {}
  // Row r sees no key of the block.
  void none(int64_t r) { fill_row(s_ + r * lds_, kn_, 0.0f); }
  // Row r's p = 2^(s * scale - shift) on cols, 0 elsewhere; returns their sum.
  float exp(int64_t r, ColumnRange cols, float scale, float shift) {
    float* srow = s_ + r * lds_;
    fill_row(srow, cols.begin, 0.0f);
    fill_row(srow + cols.end, kn_ - cols.end, 0.0f);
    return exp2_scale_shift_sum(srow + cols.begin, cols.end - cols.begin, scale, shift);
  }

 private:
  float* s_;
  int64_t lds_, kn_;
};

// s holds the m x kn scores of keys [k0, k0 + kn) (row stride bc), multiplied by the scale, and by log2(e)
// too unless softcap > 0; or, when score_scale != 1, still to be multiplied by score_scale (> 0, without
// softcap): the exponentials then fold that multiply in (the max of rounded products is the rounded
// product of the max, so the row max is taken on the unscaled scores). Each row's probabilities
// P = exp2(s - max) (0 at masked columns) go to `probabilities` (ProbabilitiesInPlace, or the bf16 rows
// of the tile products), each row's running max and sum are updated, and each row of the output
// accumulator o (row stride d) is rescaled when its max grew. per_row() runs once before each row (the
// forward kernel spreads its prefetches there).
template <typename Probabilities, typename PerRow>
inline void online_softmax_block(float* s, int64_t bc, int64_t m, int64_t kn, int64_t k0, const QueryTile& tile,
                                 const core::MaskSpec& mask, float softcap, float score_scale, float* o, int64_t d,
                                 core::OnlineSoftmaxRow* rows, Probabilities& probabilities, PerRow&& per_row) {
  const bool full = mask.tile_fully_visible(tile.row_begin, tile.row_end(), k0, k0 + kn);
  for (int64_t r = 0; r < m; ++r) {
    per_row();
    ColumnRange cols{0, kn};
    if (!full) cols = visible_columns(mask, tile.row_begin + r % tile.rows, k0, kn);
    // Masked columns become P = 0 for the P V product; they never enter the max or the sum.
    if (cols.empty()) {
      probabilities.none(r);
      continue;
    }
    float* vis = s + r * bc + cols.begin;
    const int64_t nvis = cols.end - cols.begin;
    if (softcap > 0.0f)
      for (int64_t c = 0; c < nvis; ++c) vis[c] = core::apply_softcap(vis[c], softcap) * core::kLog2e;
    core::OnlineSoftmaxRow& state = rows[r];
    const float factor = state.begin_tile(row_max(vis, nvis) * score_scale);
    if (factor != 1.0f) scale_row(o + r * d, d, factor);
    state.add(probabilities.exp(r, cols, score_scale, state.safe_max()));
  }
}

}  // namespace flashattn::detail::cpu
