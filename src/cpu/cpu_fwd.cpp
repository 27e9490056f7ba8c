// FlashAttention-2 forward on the CPU.
//
// One task per query tile (batch, KV head, chunk of its query heads, Br sequence rows). The task walks
// only the KV blocks its rows can see, converts each K/V block once for all stacked heads, and keeps
// an online softmax per row: S = Q K^T in log2 units, P = exp2(S - running max), O += P V with O
// unnormalized in fp32 and divided by the row sum once at the end (deferred normalization).
#include <algorithm>
#include <vector>

#include "core/softmax_online.h"
#include "cpu/cpu_kernels.h"
#include "cpu/row_ops.h"
#include "cpu/scratch.h"
#include "cpu/thread_pool.h"
#include "cpu/tile_gemm.h"
#include "cpu/tile_io.h"
#include "cpu/tile_softmax.h"

namespace flashattn::detail::cpu {
namespace {

enum ForwardBuffer : size_t {
  kQ,       // [stacked x d] query rows, fp32
  kO,       // [stacked x d] unnormalized output accumulator
  kS,       // [stacked x Bc] scores, then probabilities in place
  kK,       // [Bc x d] K converted to fp32 (fp32 inputs are read in place)
  kV,       // [Bc x d] V converted to fp32
  kFactor,  // [stacked] 1 / row sum at the end
};

class ForwardTileRunner {
 public:
  ForwardTileRunner(const Problem& p, const TileShape& shape)
      : p_(p),
        shape_(shape),
        d_(p.head_dim),
        max_stacked_(heads_per_tile(p, shape) * rows_per_tile(p, shape)),
        scratch_({max_stacked_ * d_, max_stacked_ * d_, max_stacked_ * shape.block_keys,
                  shape.block_keys * d_, shape.block_keys * d_, max_stacked_}),
        rows_(size_t(max_stacked_)) {}

  void run(const QueryTile& tile) {
    const int64_t m = tile.stacked();
    const int64_t bc = shape_.block_keys;
    const core::MaskSpec mask = p_.mask(tile.batch);
    float* q = scratch_[kQ];
    float* o = scratch_[kO];
    float* s = scratch_[kS];
    float* k = scratch_[kK];
    float* v = scratch_[kV];

    load_stacked(p_, p_.q, tile, q);
    fill_row(o, m * d_, 0.0f);
    std::fill(rows_.begin(), rows_.begin() + m, core::OnlineSoftmaxRow{});

    // Softcap needs the score in natural units before the cap; without it fold log2(e) into the product.
    const float alpha = p_.softcap > 0.0f ? p_.scale : p_.scale * core::kLog2e;
    const int64_t k_offset = p_.k_row_offset(tile.batch);
    const int64_t len_k = p_.len_k(tile.batch);
    const core::BlockRange blocks = core::kv_block_range(mask, tile.row_begin, tile.row_end(), bc);
    for (int64_t j = blocks.first; j < blocks.last; ++j) {
      const int64_t k0 = j * bc;
      const int64_t kn = std::min(bc, len_k - k0);
      const RowsView kv = view_rows(p_, p_.k, tile.batch, k_offset, k0, kn, tile.kv_head, k);
      const RowsView vv = view_rows(p_, p_.v, tile.batch, k_offset, k0, kn, tile.kv_head, v);
      // The next block's K and V, fetched a slice per score row while this block is processed.
      prefetch_.clear();
      if (j + 1 < blocks.last) {
        const int64_t next_rows = std::min(bc, len_k - k0 - bc);
        prefetch_.add(RowPrefetcher(p_, p_.k, tile.batch, k_offset + k0 + bc, next_rows, tile.kv_head));
        prefetch_.add(RowPrefetcher(p_, p_.v, tile.batch, k_offset + k0 + bc, next_rows, tile.kv_head));
      }
      prefetch_.spread_over(m);
      tile_gemm(Op::kNone, Op::kTranspose, m, kn, d_, alpha, q, d_, kv.data, kv.ld, /*beta=*/0.0f, s, bc);

      online_softmax_block(s, bc, m, kn, k0, tile, mask, p_.softcap, o, d_, rows_.data(),
                           [&] { prefetch_.step(); });
      tile_gemm(Op::kNone, Op::kNone, m, d_, kn, /*alpha=*/1.0f, s, bc, vv.data, vv.ld, /*beta=*/1.0f, o, d_);
    }

    // Rows that saw no key keep O = 0 and a zero sum: inv_sum() is 0 and lse() is -inf, never NaN.
    float* factor = scratch_[kFactor];
    for (int64_t r = 0; r < m; ++r) factor[r] = rows_[size_t(r)].inv_sum();
    store_stacked(p_, o, factor, tile, p_.out);
    if (p_.lse.present()) store_lse(tile);
  }

 private:
  void store_lse(const QueryTile& tile) {
    float* lse = static_cast<float*>(p_.lse.ptr);
    const int64_t row_offset = p_.q_row_offset(tile.batch);
    for (int64_t g = 0; g < tile.heads; ++g)
      for (int64_t r = 0; r < tile.rows; ++r)
        lse[tile.batch * p_.lse.batch_stride + (tile.head_begin + g) * p_.lse.head_stride +
            (row_offset + tile.row_begin + r) * p_.lse.row_stride] = rows_[size_t(g * tile.rows + r)].lse();
  }

  const Problem& p_;
  const TileShape shape_;
  const int64_t d_;
  const int64_t max_stacked_;
  Scratch scratch_;
  std::vector<core::OnlineSoftmaxRow> rows_;
  PrefetchQueue prefetch_;
};

}  // namespace

Status run_forward(const Problem& p, const TileShape& shape, int workers) {
  const std::vector<QueryTile> tiles = make_query_tiles(p, shape);
  if (tiles.empty()) return Status::Ok();
  return run_workers(resolve_worker_count(workers, int64_t(tiles.size())), int64_t(tiles.size()),
                     [&](TaskQueue& queue) {
                       ForwardTileRunner runner(p, shape);
                       int64_t t = 0;
                       while (queue.pop(&t)) runner.run(tiles[size_t(t)]);
                       return Status::Ok();
                     });
}

}  // namespace flashattn::detail::cpu
