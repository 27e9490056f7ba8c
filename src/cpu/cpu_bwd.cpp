// FlashAttention backward on the CPU, by recomputation from the saved log-sum-exp.
//
// Three passes, each with one writer per output element (no atomics, no reductions across workers):
//   1. row statistics: D = rowsum(dO * O) and the LSE in log2 units, per (query head, row);
//   2. KV-parallel: per (batch, KV head, KV block), loop over all query heads of the group and all query
//      tiles that see the block: P = exp2(S - LSE), dV += P^T dO, dP = dO V^T, dS = P (dP - D),
//      dK += dS^T Q * scale;
//   3. query-parallel: per query tile, loop over its KV blocks and recompute P and dS: dQ += dS K * scale.
// Pass 3 recomputes S and dP instead of sharing dS with pass 2, which would need either atomics on dQ or
// a dQ buffer per KV block; the price is two extra tile products per (query tile, KV block) pair.
#include <algorithm>
#include <vector>

#include "core/softmax_online.h"
#include "cpu/cpu_kernels.h"
#include "cpu/row_ops.h"
#include "cpu/scratch.h"
#include "cpu/thread_pool.h"
#include "cpu/tile_gemm.h"
#include "cpu/tile_io.h"

namespace flashattn::detail::cpu {
namespace {

// Per (query head, row) statistics of pass 1, indexed [head][flat row].
struct RowStats {
  std::vector<float> delta;     // D = rowsum(dO * O)
  std::vector<float> lse_log2;  // saved LSE * log2(e); +inf where the LSE is -inf (see prepare_row_stats)
  int64_t rows = 0;             // flat rows per head

  // Flat row of sequence row `row` of batch b: varlen rows are already packed, padded rows are b * seqlen_q + row.
  static int64_t flat_row(const Problem& p, int64_t b, int64_t row) {
    return (p.varlen ? 0 : b * p.seqlen_q) + p.q_row_offset(b) + row;
  }
};

Status prepare_row_stats(const Problem& p, int workers, RowStats* stats) {
  stats->rows = p.varlen ? int64_t(p.cu_q.back()) : p.batch * p.seqlen_q;
  stats->delta.assign(size_t(stats->rows * p.heads_q), 0.0f);
  stats->lse_log2.assign(size_t(stats->rows * p.heads_q), 0.0f);
  const int64_t tasks = p.batch * p.heads_q;
  if (tasks == 0) return Status::Ok();
  return run_workers(resolve_worker_count(workers, tasks), tasks, [&](TaskQueue& queue) {
    Scratch scratch({p.head_dim, p.head_dim});
    float* dout = scratch[0];
    float* out = scratch[1];
    const float* lse = static_cast<const float*>(p.lse.ptr);
    int64_t t = 0;
    while (queue.pop(&t)) {
      const int64_t b = t / p.heads_q, h = t % p.heads_q;
      const int64_t row_offset = p.q_row_offset(b);
      for (int64_t r = 0; r < p.len_q(b); ++r) {
        const int64_t abs_row = row_offset + r;
        load_row(p.dout.ptr, p.dtype, element_offset(p.dout, b, abs_row, h), p.head_dim, dout);
        load_row(p.out.ptr, p.dtype, element_offset(p.out, b, abs_row, h), p.head_dim, out);
        const size_t i = size_t(h * stats->rows + RowStats::flat_row(p, b, r));
        stats->delta[i] = dot_row(dout, out, p.head_dim);
        const float l = lse[b * p.lse.batch_stride + h * p.lse.head_stride + abs_row * p.lse.row_stride];
        // A row that saw no key has LSE = -inf; every score of it is masked too, and S - (-inf) would
        // be -inf - -inf = NaN. With +inf the exponent is -inf and P = 0.
        stats->lse_log2[i] = l == core::kNegInf ? -core::kNegInf : l * core::kLog2e;
      }
    }
    return Status::Ok();
  });
}

enum BackwardBuffer : size_t {
  kQ,         // [stacked x d] Q rows (stacked heads), fp32
  kDout,      // [stacked x d] dO rows
  kDq,        // [stacked x d] dQ accumulator (query pass)
  kK,         // [Bc x d] K converted to fp32 (fp32 inputs are read in place)
  kV,         // [Bc x d]
  kDk,        // [Bc x d] dK accumulator (KV pass)
  kDv,        // [Bc x d] dV accumulator (KV pass)
  kP,         // [stacked x Bc] scores, then probabilities
  kDs,        // [stacked x Bc] dP, then dS
  kCapGrad,   // [stacked x Bc] softcap derivative at the capped score
  kRowLse,    // [stacked] LSE (log2) of the stacked rows
  kRowDelta,  // [stacked] D of the stacked rows
};

// The state one worker reuses across its tasks, and the block math both gradient passes share.
class BackwardWorker {
 public:
  BackwardWorker(const Problem& p, const TileShape& shape, const RowStats& stats)
      : p_(p),
        shape_(shape),
        stats_(stats),
        d_(p.head_dim),
        bc_(shape.block_keys),
        max_stacked_(heads_per_tile(p, shape) * rows_per_tile(p, shape)),
        scratch_({max_stacked_ * d_, max_stacked_ * d_, max_stacked_ * d_, bc_ * d_, bc_ * d_, bc_ * d_,
                  bc_ * d_, max_stacked_ * bc_, max_stacked_ * bc_, max_stacked_ * bc_, max_stacked_,
                  max_stacked_}) {}

  // Q, dO and the row statistics of a query tile. Always copied: Q and dO are read in place by the
  // micro-kernel (A operand), which must find them in cache, not in L3.
  void load_query_side(const QueryTile& tile) {
    load_stacked(p_, p_.q, tile, scratch_[kQ]);
    load_stacked(p_, p_.dout, tile, scratch_[kDout]);
    q_ = {scratch_[kQ], d_};
    dout_ = {scratch_[kDout], d_};
    for (int64_t g = 0; g < tile.heads; ++g)
      for (int64_t r = 0; r < tile.rows; ++r) {
        const size_t i = size_t((tile.head_begin + g) * stats_.rows +
                                RowStats::flat_row(p_, tile.batch, tile.row_begin + r));
        scratch_[kRowLse][g * tile.rows + r] = stats_.lse_log2[i];
        scratch_[kRowDelta][g * tile.rows + r] = stats_.delta[i];
      }
  }

  void load_kv_block(int64_t b, int64_t kv_head, int64_t k0, int64_t kn) {
    const int64_t k_offset = p_.k_row_offset(b);
    k_ = view_rows(p_, p_.k, b, k_offset, k0, kn, kv_head, scratch_[kK]);
    v_ = view_rows(p_, p_.v, b, k_offset, k0, kn, kv_head, scratch_[kV]);
  }

  // For the loaded query tile and KV block [k0, k0 + kn): P into kP and dS into kDs (both zero where
  // masked), from S = Q K^T, the saved LSE, dP = dO V^T and D. Issues the queued prefetches on the way.
  void block_probs_and_ds(const QueryTile& tile, const core::MaskSpec& mask, int64_t k0, int64_t kn) {
    const int64_t m = tile.stacked();
    float* s = scratch_[kP];
    float* ds = scratch_[kDs];
    float* cap_grad = scratch_[kCapGrad];
    const float* lse = scratch_[kRowLse];
    const float* delta = scratch_[kRowDelta];
    const bool softcap = p_.softcap > 0.0f;
    const float alpha = softcap ? p_.scale : p_.scale * core::kLog2e;
    tile_gemm(Op::kNone, Op::kTranspose, m, kn, d_, alpha, q_.data, q_.ld, k_.data, k_.ld, /*beta=*/0.0f, s, bc_);
    tile_gemm(Op::kNone, Op::kTranspose, m, kn, d_, /*alpha=*/1.0f, dout_.data, dout_.ld, v_.data, v_.ld,
              /*beta=*/0.0f, ds, bc_);
    const bool full = mask.tile_fully_visible(tile.row_begin, tile.row_end(), k0, k0 + kn);
    prefetch_.spread_over(m);
    for (int64_t r = 0; r < m; ++r) {
      prefetch_.step();
      float* srow = s + r * bc_;
      float* dsrow = ds + r * bc_;
      ColumnRange cols{0, kn};
      if (!full) cols = visible_columns(mask, tile.row_begin + r % tile.rows, k0, kn);
      fill_row(srow, cols.begin, 0.0f);
      fill_row(srow + cols.end, kn - cols.end, 0.0f);
      fill_row(dsrow, cols.begin, 0.0f);
      fill_row(dsrow + cols.end, kn - cols.end, 0.0f);
      const int64_t c0 = cols.begin, c1 = cols.end;
      if (softcap) {
        float* grow = cap_grad + r * bc_;
        for (int64_t c = c0; c < c1; ++c) {
          const float capped = core::apply_softcap(srow[c], p_.softcap);
          grow[c] = core::softcap_grad(capped, p_.softcap);
          srow[c] = capped * core::kLog2e;
        }
      }
      exp2_shift(srow + c0, c1 - c0, lse[r]);
      const float dr = delta[r];
      for (int64_t c = c0; c < c1; ++c) dsrow[c] = srow[c] * (dsrow[c] - dr);
      if (softcap) {
        const float* grow = cap_grad + r * bc_;
        for (int64_t c = c0; c < c1; ++c) dsrow[c] *= grow[c];
      }
    }
  }

  // Pass 2: dK and dV of KV block [k0, k0 + kn) of (b, kv_head).
  void run_kv_block(int64_t b, int64_t kv_head, int64_t k0, int64_t kn) {
    load_kv_block(b, kv_head, k0, kn);
    float* dk = scratch_[kDk];
    float* dv = scratch_[kDv];
    fill_row(dk, kn * d_, 0.0f);
    fill_row(dv, kn * d_, 0.0f);

    const core::MaskSpec mask = p_.mask(b);
    const int64_t len_q = p_.len_q(b);
    // key_begin and key_end are nondecreasing in the row, so the rows that see any key of the block
    // form one interval [first, last).
    const int64_t first = partition_rows(len_q, [&](int64_t row) { return mask.key_end(row) <= k0; });
    const int64_t last = partition_rows(len_q, [&](int64_t row) { return mask.key_begin(row) < k0 + kn; });
    const int64_t group = p_.group();
    const int64_t chunk = heads_per_tile(p_, shape_);
    const int64_t rows = rows_per_tile(p_, shape_);
    std::vector<QueryTile> tiles;
    for (int64_t g0 = 0; g0 < group; g0 += chunk)
      for (int64_t r0 = first; r0 < last; r0 += rows) {
        QueryTile tile;
        tile.batch = b;
        tile.kv_head = kv_head;
        tile.head_begin = kv_head * group + g0;
        tile.heads = std::min(chunk, group - g0);
        tile.row_begin = r0;
        tile.rows = std::min(rows, last - r0);
        tiles.push_back(tile);
      }
    for (size_t t = 0; t < tiles.size(); ++t) {
      const QueryTile& tile = tiles[t];
      const int64_t m = tile.stacked();
      load_query_side(tile);
      prefetch_.clear();
      if (t + 1 < tiles.size()) queue_query_side(tiles[t + 1]);
      block_probs_and_ds(tile, mask, k0, kn);
      tile_gemm(Op::kTranspose, Op::kNone, kn, d_, m, /*alpha=*/1.0f, scratch_[kP], bc_, dout_.data, dout_.ld,
                /*beta=*/1.0f, dv, d_);
      tile_gemm(Op::kTranspose, Op::kNone, kn, d_, m, p_.scale, scratch_[kDs], bc_, q_.data, q_.ld,
                /*beta=*/1.0f, dk, d_);
    }

    const int64_t k_offset = p_.k_row_offset(b);
    for (int64_t r = 0; r < kn; ++r) {
      store_row(dk + r * d_, d_, 1.0f, p_.dk.ptr, p_.dtype, element_offset(p_.dk, b, k_offset + k0 + r, kv_head));
      store_row(dv + r * d_, d_, 1.0f, p_.dv.ptr, p_.dtype, element_offset(p_.dv, b, k_offset + k0 + r, kv_head));
    }
  }

  // Pass 3: dQ of one query tile.
  void run_query_tile(const QueryTile& tile) {
    const int64_t m = tile.stacked();
    float* dq = scratch_[kDq];
    fill_row(dq, m * d_, 0.0f);
    load_query_side(tile);
    const core::MaskSpec mask = p_.mask(tile.batch);
    const int64_t len_k = p_.len_k(tile.batch);
    const int64_t k_offset = p_.k_row_offset(tile.batch);
    const core::BlockRange blocks = core::kv_block_range(mask, tile.row_begin, tile.row_end(), bc_);
    for (int64_t j = blocks.first; j < blocks.last; ++j) {
      const int64_t k0 = j * bc_;
      const int64_t kn = std::min(bc_, len_k - k0);
      load_kv_block(tile.batch, tile.kv_head, k0, kn);
      prefetch_.clear();
      if (j + 1 < blocks.last) {
        const int64_t next_rows = std::min(bc_, len_k - k0 - bc_);
        prefetch_.add(RowPrefetcher(p_, p_.k, tile.batch, k_offset + k0 + bc_, next_rows, tile.kv_head));
        prefetch_.add(RowPrefetcher(p_, p_.v, tile.batch, k_offset + k0 + bc_, next_rows, tile.kv_head));
      }
      block_probs_and_ds(tile, mask, k0, kn);
      tile_gemm(Op::kNone, Op::kNone, m, d_, kn, p_.scale, scratch_[kDs], bc_, k_.data, k_.ld, /*beta=*/1.0f, dq,
                d_);
    }
    store_stacked(p_, dq, nullptr, tile, p_.dq);
  }

 private:
  // Queues the Q and dO rows of the next query tile of the KV pass.
  void queue_query_side(const QueryTile& next) {
    const int64_t row_offset = p_.q_row_offset(next.batch);
    for (int64_t g = 0; g < next.heads; ++g)
      for (const Strided* t : {&p_.q, &p_.dout})
        prefetch_.add(RowPrefetcher(p_, *t, next.batch, row_offset + next.row_begin, next.rows, next.head_begin + g));
  }

  // The first row in [0, n) for which `before` is false; `before` must be true on a prefix.
  template <typename Pred>
  static int64_t partition_rows(int64_t n, Pred before) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (before(mid))
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo;
  }

  const Problem& p_;
  const TileShape shape_;
  const RowStats& stats_;
  const int64_t d_;
  const int64_t bc_;
  const int64_t max_stacked_;
  Scratch scratch_;
  RowsView q_, dout_, k_, v_;  // operands of the current query tile and KV block
  PrefetchQueue prefetch_;
};

struct KvBlock {
  int64_t batch = 0, kv_head = 0, key_begin = 0, keys = 0;
};

std::vector<KvBlock> make_kv_blocks(const Problem& p, const TileShape& shape) {
  std::vector<KvBlock> blocks;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t k0 = 0; k0 < p.len_k(b); k0 += shape.block_keys)
      for (int64_t hk = 0; hk < p.heads_kv; ++hk)
        blocks.push_back({b, hk, k0, std::min(shape.block_keys, p.len_k(b) - k0)});
  return blocks;
}

}  // namespace

Status run_backward(const Problem& p, const TileShape& shape, int workers) {
  RowStats stats;
  Status s = prepare_row_stats(p, workers, &stats);
  if (!s.ok()) return s;

  const std::vector<KvBlock> kv_blocks = make_kv_blocks(p, shape);
  if (!kv_blocks.empty()) {
    s = run_workers(resolve_worker_count(workers, int64_t(kv_blocks.size())), int64_t(kv_blocks.size()),
                    [&](TaskQueue& queue) {
                      BackwardWorker worker(p, shape, stats);
                      int64_t t = 0;
                      while (queue.pop(&t)) {
                        const KvBlock& kb = kv_blocks[size_t(t)];
                        worker.run_kv_block(kb.batch, kb.kv_head, kb.key_begin, kb.keys);
                      }
                      return Status::Ok();
                    });
    if (!s.ok()) return s;
  }

  const std::vector<QueryTile> tiles = make_query_tiles(p, shape);
  if (tiles.empty()) return Status::Ok();
  return run_workers(resolve_worker_count(workers, int64_t(tiles.size())), int64_t(tiles.size()),
                     [&](TaskQueue& queue) {
                       BackwardWorker worker(p, shape, stats);
                       int64_t t = 0;
                       while (queue.pop(&t)) worker.run_query_tile(tiles[size_t(t)]);
                       return Status::Ok();
                     });
}

}  // namespace flashattn::detail::cpu
