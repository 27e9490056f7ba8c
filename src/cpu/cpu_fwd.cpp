// FlashAttention-2 forward on the CPU.
//
// One task per query tile (batch, KV head, chunk of its query heads, Br sequence rows). The task walks
// only the KV blocks its rows can see, prepares each K/V block once for all stacked heads, and keeps
// an online softmax per row: S = Q K^T in log2 units, P = exp2(S - running max), O += P V with O
// unnormalized in fp32 and divided by the row sum once at the end (deferred normalization).
// The products run in fp32 on converted rows, or, for bf16 and fp16 inputs on a CPU with AMX, as bf16 tile
// multiplies (bf16_tiles.h); the softmax and the accumulator are fp32 either way.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/softmax_online.h"
#include "cpu/bf16_tile_products.h"
#include "cpu/cpu_kernels.h"
#include "cpu/row_ops.h"
#include "cpu/scratch.h"
#include "cpu/thread_pool.h"
#include "cpu/tile_gemm.h"
#include "cpu/tile_io.h"
#include "cpu/tile_softmax.h"

namespace flashattn::detail::cpu {
namespace {

// Both ways of computing a tile's products keep the query rows, a KV block and the scores in their own
// form; the runner below owns the softmax state and the output accumulator (fp32 in both).
//
// Fp32Products: rows converted to fp32 (fp32 inputs read in place), fp32 tile_gemm.
class Fp32Products {
 public:
  Fp32Products(const Problem& p, int64_t max_stacked, int64_t bc)
      : p_(p), d_(p.head_dim), scratch_({max_stacked * d_, bc * d_, bc * d_}) {}

  // Rows the products touch for a tile of `rows` rows: its own.
  static int64_t padded_rows(int64_t rows) { return rows; }
  static constexpr bool kPrefetchNextBlock = true;

  void load_q(const QueryTile& tile) { load_stacked(p_, p_.q, tile, scratch_[kQ]); }

  void load_kv(const QueryTile& tile, int64_t k_offset, int64_t k0, int64_t kn) {
    k_ = view_rows(p_, p_.k, tile.batch, k_offset, k0, kn, tile.kv_head, scratch_[kK]);
    v_ = view_rows(p_, p_.v, tile.batch, k_offset, k0, kn, tile.kv_head, scratch_[kV]);
  }

  // s[m x kn] = alpha Q K^T; returns the factor left for the softmax to apply (none).
  float scores(int64_t m, int64_t kn, float alpha, float* s, int64_t lds) {
    tile_gemm(Op::kNone, Op::kTranspose, m, kn, d_, alpha, scratch_[kQ], d_, k_.data, k_.ld, /*beta=*/0.0f, s, lds);
    return 1.0f;
  }

  // Where the softmax leaves P: in place over the scores.
  ProbabilitiesInPlace probabilities(float* s, int64_t lds, int64_t kn) { return {s, lds, kn}; }

  // o[m x d] += P V, P in s.
  void accumulate(int64_t m, int64_t kn, const float* s, int64_t lds, float* o) {
    tile_gemm(Op::kNone, Op::kNone, m, d_, kn, /*alpha=*/1.0f, s, lds, v_.data, v_.ld, /*beta=*/1.0f, o, d_);
  }

 private:
  enum Buffer : size_t {
    kQ,  // [stacked x d] query rows, fp32
    kK,  // [Bc x d] K converted to fp32 (fp32 inputs are read in place)
    kV,  // [Bc x d] V converted to fp32
  };
  const Problem& p_;
  const int64_t d_;
  Scratch scratch_;
  RowsView k_, v_;
};

template <typename Products>
class ForwardTileRunner {
 public:
  template <typename... ProductArgs>
  ForwardTileRunner(const Problem& p, const TileShape& shape, ProductArgs... product_args)
      : p_(p),
        shape_(shape),
        d_(p.head_dim),
        max_stacked_(Products::padded_rows(heads_per_tile(p, shape) * rows_per_tile(p, shape))),
        products_(p, max_stacked_, shape.block_keys, product_args...),
        scratch_({max_stacked_ * d_, max_stacked_ * shape.block_keys, max_stacked_}),
        rows_(size_t(max_stacked_)) {}

  void run(const QueryTile& tile) {
    const int64_t m = tile.stacked();
    const int64_t bc = shape_.block_keys;
    const core::MaskSpec mask = p_.mask(tile.batch);
    float* o = scratch_[kO];
    float* s = scratch_[kS];

    products_.load_q(tile);
    fill_row(o, Products::padded_rows(m) * d_, 0.0f);
    std::fill(rows_.begin(), rows_.begin() + m, core::OnlineSoftmaxRow{});

    // Softcap needs the score in natural units before the cap; without it fold log2(e) into the product.
    const float alpha = p_.softcap > 0.0f ? p_.scale : p_.scale * core::kLog2e;
    const int64_t k_offset = p_.k_row_offset(tile.batch);
    const int64_t len_k = p_.len_k(tile.batch);
    const core::BlockRange blocks = core::kv_block_range(mask, tile.row_begin, tile.row_end(), bc);
    for (int64_t j = blocks.first; j < blocks.last; ++j) {
      const int64_t k0 = j * bc;
      const int64_t kn = std::min(bc, len_k - k0);
      products_.load_kv(tile, k_offset, k0, kn);
      // The next block's K and V, fetched a slice per score row while this block is processed.
      prefetch_.clear();
      if (Products::kPrefetchNextBlock && j + 1 < blocks.last) {
        const int64_t next_rows = std::min(bc, len_k - k0 - bc);
        prefetch_.add(RowPrefetcher(p_, p_.k, tile.batch, k_offset + k0 + bc, next_rows, tile.kv_head));
        prefetch_.add(RowPrefetcher(p_, p_.v, tile.batch, k_offset + k0 + bc, next_rows, tile.kv_head));
      }
      prefetch_.spread_over(m);
      const float score_scale = products_.scores(m, kn, alpha, s, bc);
      auto probabilities = products_.probabilities(s, bc, kn);
      online_softmax_block(s, bc, m, kn, k0, tile, mask, p_.softcap, score_scale, o, d_, rows_.data(), probabilities,
                           [&] { prefetch_.step(); });
      products_.accumulate(m, kn, s, bc, o);
    }

    // Rows that saw no key keep O = 0 and a zero sum: inv_sum() is 0 and lse() is -inf, never NaN.
    float* factor = scratch_[kFactor];
    for (int64_t r = 0; r < m; ++r) factor[r] = rows_[size_t(r)].inv_sum();
    store_stacked(p_, o, factor, tile, p_.out);
    if (p_.lse.present()) store_lse(tile);
  }

 private:
  enum Buffer : size_t {
    kO,       // [stacked x d] unnormalized output accumulator
    kS,       // [stacked x Bc] scores, then probabilities in place
    kFactor,  // [stacked] 1 / row sum at the end
  };

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
  Products products_;
  Scratch scratch_;
  std::vector<core::OnlineSoftmaxRow> rows_;
  PrefetchQueue prefetch_;
};

template <typename Products, typename... ProductArgs>
Status run_tiles(const Problem& p, const TileShape& shape, int workers, const std::vector<QueryTile>& tiles,
                 ProductArgs... product_args) {
  return run_workers(resolve_worker_count(workers, int64_t(tiles.size())), int64_t(tiles.size()),
                     [&](TaskQueue& queue) {
                       ForwardTileRunner<Products> runner(p, shape, product_args...);
                       int64_t t = 0;
                       while (queue.pop(&t)) runner.run(tiles[size_t(t)]);
                       return Status::Ok();
                     });
}

}  // namespace

Status run_forward(const Problem& p, const TileShape& shape, int workers) {
  const std::vector<QueryTile> tiles = make_query_tiles(p, shape);
  if (tiles.empty()) return Status::Ok();
  const Bf16Products products = tile_products(p);
  if (products == Bf16Products::kFp32) return run_tiles<Fp32Products>(p, shape, workers, tiles);
  return run_tiles<Bf16TileProducts>(p, shape, workers, tiles, products);
}

}  // namespace flashattn::detail::cpu
