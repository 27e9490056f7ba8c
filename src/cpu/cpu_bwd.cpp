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
// The products run in fp32 on converted rows, or, for bf16 and fp16 inputs on a CPU with AMX, as bf16 tile
// multiplies (bf16_tiles.h); the element-wise steps are fp32 either way.
#include <algorithm>
#include <vector>

#include "core/softmax_online.h"
#include "cpu/bf16_operands.h"
#include "cpu/bf16_tiles.h"
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

// The backward's five products on a query tile and a KV block, and what they read:
//   S = Q K^T, dP = dO V^T (both passes), dV += P^T dO, dK += dS^T Q (KV pass), dQ += dS K (query pass).
//
// Fp32BackwardProducts: rows converted to fp32 (K and V read in place when fp32), fp32 tile_gemm; the
// softmax scale of dK and dQ rides in the products.
class Fp32BackwardProducts {
 public:
  Fp32BackwardProducts(const Problem& p, int64_t max_stacked, int64_t bc)
      : p_(p), d_(p.head_dim), scratch_({max_stacked * d_, max_stacked * d_, bc * d_, bc * d_}) {}

  // Rows the products touch for a tile of `rows` rows: its own.
  static int64_t padded_rows(int64_t rows) { return rows; }
  static constexpr bool kPrefetch = true;
  // dK and dQ leave the products already scaled.
  float gradient_scale() const { return 1.0f; }

  // Q and dO of a query tile. Always copied: they are read in place by the micro-kernel (A operand), which
  // must find them in cache, not in L3.
  void load_query_side(const QueryTile& tile, bool /*kv_pass*/) {
    load_stacked(p_, p_.q, tile, scratch_[kQ]);
    load_stacked(p_, p_.dout, tile, scratch_[kDout]);
  }

  void load_kv_block(int64_t b, int64_t kv_head, int64_t k0, int64_t kn, bool /*kv_pass*/) {
    const int64_t k_offset = p_.k_row_offset(b);
    k_ = view_rows(p_, p_.k, b, k_offset, k0, kn, kv_head, scratch_[kK]);
    v_ = view_rows(p_, p_.v, b, k_offset, k0, kn, kv_head, scratch_[kV]);
  }

  // s = alpha Q K^T and ds = dO V^T, m x kn (row stride ld); returns the factor left for the exponentials
  // to apply to s (none).
  float scores_and_dp(int64_t m, int64_t kn, float alpha, float* s, float* ds, int64_t ld) {
    tile_gemm(Op::kNone, Op::kTranspose, m, kn, d_, alpha, scratch_[kQ], d_, k_.data, k_.ld, /*beta=*/0.0f, s, ld);
    tile_gemm(Op::kNone, Op::kTranspose, m, kn, d_, /*alpha=*/1.0f, scratch_[kDout], d_, v_.data, v_.ld,
              /*beta=*/0.0f, ds, ld);
    return 1.0f;
  }

  // One row's P = 2^(s * scale - shift) over s and dS = P (dP - delta) over ds, n columns.
  void probs_and_ds(float* s, float* ds, int64_t n, float scale, float shift, float delta) const {
    exp2_scale_shift(s, n, scale, shift);
    for (int64_t c = 0; c < n; ++c) ds[c] = s[c] * (ds[c] - delta);
  }

  // dv += P^T dO, dk += scale dS^T Q ([kn x d], row stride d).
  void accumulate_dkdv(int64_t m, int64_t kn, const float* p, const float* ds, int64_t ld, float* dk, float* dv) {
    tile_gemm(Op::kTranspose, Op::kNone, kn, d_, m, /*alpha=*/1.0f, p, ld, scratch_[kDout], d_, /*beta=*/1.0f, dv,
              d_);
    tile_gemm(Op::kTranspose, Op::kNone, kn, d_, m, p_.scale, ds, ld, scratch_[kQ], d_, /*beta=*/1.0f, dk, d_);
  }

  // dq += scale dS K ([m x d]).
  void accumulate_dq(int64_t m, int64_t kn, const float* ds, int64_t ld, float* dq) {
    tile_gemm(Op::kNone, Op::kNone, m, d_, kn, p_.scale, ds, ld, k_.data, k_.ld, /*beta=*/1.0f, dq, d_);
  }

 private:
  enum Buffer : size_t {
    kQ,     // [stacked x d] Q rows (stacked heads), fp32
    kDout,  // [stacked x d] dO rows
    kK,     // [Bc x d] K converted to fp32 (fp32 inputs are read in place)
    kV,     // [Bc x d]
  };
  const Problem& p_;
  const int64_t d_;
  Scratch scratch_;
  RowsView k_, v_;
};

// Bf16BackwardProducts: the five products on the bf16 tiles, with the operands and padding of the forward's
// Bf16TileProducts (cpu_fwd.cpp). Q and dO rows are copied (A operands of S and dP) and, in the KV pass,
// packed as B of dK and dV; K and V blocks are packed transposed (B of S and dP) and, in the query pass, K also
// as B of dQ. P and dS enter their products as hi + lo bf16 terms, transposed for dV and dK. dK and dQ
// accumulate unscaled; the scale is applied once when they are stored.
class Bf16BackwardProducts : Bf16Operands {
 public:
  Bf16BackwardProducts(const Problem& p, int64_t max_stacked, int64_t bc, Bf16Products products)
      : Bf16Operands(p, bc, products),
        max_stacked_(max_stacked),
        scratch_(buffer_sizes(max_stacked * d_, bc * d_, max_stacked * bc, fp16_)) {}

  // Rows the products touch for a tile of `rows` rows: whole 32-row blocks.
  static int64_t padded_rows(int64_t rows) { return round_up_to_tile(rows); }
  // As in the forward: the packing reads each block at once, and software prefetches only stall.
  static constexpr bool kPrefetch = false;
  float gradient_scale() const { return p_.scale; }

  void load_query_side(const QueryTile& tile, bool kv_pass) {
    rows_pad_ = padded_rows(tile.stacked());
    copy_stacked_u16(p_, p_.q, tile, rows_pad_, buffer(kQ));
    copy_stacked_u16(p_, p_.dout, tile, rows_pad_, buffer(kDout));
    q_ = terms(buffer(kQ), d_, rows_pad_, buffer(kQHi), buffer(kQLo));
    dout_ = terms(buffer(kDout), d_, rows_pad_, buffer(kDoutHi), buffer(kDoutLo));
    if (kv_pass) {
      q_packed_ = pack_v_terms(products_, q_, rows_pad_, rows_pad_, d_, buffer(kQPacked), buffer(kQPackedLo));
      dout_packed_ =
          pack_v_terms(products_, dout_, rows_pad_, rows_pad_, d_, buffer(kDoutPacked), buffer(kDoutPackedLo));
    }
  }

  void load_kv_block(int64_t b, int64_t kv_head, int64_t k0, int64_t kn, bool kv_pass) {
    keys_pad_ = round_up_to_tile(kn);
    const int64_t row = p_.k_row_offset(b) + k0;
    const Bf16Terms k = rows_terms(p_.k, b, row, kv_head, kn, buffer(kRowsHi), buffer(kRowsLo));
    kt_ = pack_kt_terms(products_, k, kn, keys_pad_, d_, buffer(kKt), buffer(kKtLo));
    if (!kv_pass) k_packed_ = pack_v_terms(products_, k, kn, keys_pad_, d_, buffer(kKPacked), buffer(kKPackedLo));
    const Bf16Terms v = rows_terms(p_.v, b, row, kv_head, kn, buffer(kRowsHi), buffer(kRowsLo));
    vt_ = pack_kt_terms(products_, v, kn, keys_pad_, d_, buffer(kVt), buffer(kVtLo));
  }

  // S unscaled: the exponentials fold alpha in (returned), except with softcap, which needs the scaled
  // score first.
  float scores_and_dp(int64_t m, int64_t kn, float alpha, float* s, float* ds, int64_t ld) {
    bf16_gemm(products_, rows_pad_, keys_pad_, d_, q_, kt_, /*accumulate=*/false, s, ld);
    bf16_gemm(products_, rows_pad_, keys_pad_, d_, dout_, vt_, /*accumulate=*/false, ds, ld);
    if (p_.softcap <= 0.0f) return alpha;
    for (int64_t r = 0; r < m; ++r) scale_row(s + r * ld, kn, alpha);
    return 1.0f;
  }

  // The same in one pass with fused multiply-adds (exp2_ds_row).
  void probs_and_ds(float* s, float* ds, int64_t n, float scale, float shift, float delta) const {
    exp2_ds_row(products_, s, ds, n, scale, shift, delta);
  }

  // P^T and dS^T as A operands [keys_pad x rows_pad], then dV and dK over the tile's rows.
  void accumulate_dkdv(int64_t m, int64_t kn, const float* p, const float* ds, int64_t ld, float* dk, float* dv) {
    const Bf16Terms transposed{buffer(kHi), buffer(kLo), max_stacked_};
    split_transposed(products_, p, ld, m, kn, rows_pad_, keys_pad_, buffer(kHi), buffer(kLo), transposed.ld);
    bf16_gemm(products_, keys_pad_, d_, rows_pad_, transposed, dout_packed_, /*accumulate=*/true, dv, d_);
    split_transposed(products_, ds, ld, m, kn, rows_pad_, keys_pad_, buffer(kHi), buffer(kLo), transposed.ld);
    bf16_gemm(products_, keys_pad_, d_, rows_pad_, transposed, q_packed_, /*accumulate=*/true, dk, d_);
  }

  void accumulate_dq(int64_t /*m*/, int64_t kn, const float* ds, int64_t ld, float* dq) {
    const Bf16Terms rows{buffer(kHi), buffer(kLo), bc_};
    split_rows(products_, ds, ld, rows_pad_, kn, keys_pad_, buffer(kHi), buffer(kLo), rows.ld);
    bf16_gemm(products_, rows_pad_, d_, keys_pad_, rows, k_packed_, /*accumulate=*/true, dq, d_);
  }

 private:
  enum Buffer : size_t {
    kQ,             // [stacked x d] Q rows as stored (bf16 or fp16), zero past the tile
    kDout,          // [stacked x d] dO rows
    kQPacked,       // Q as B of dK (KV pass; the first term of fp16 inputs)
    kDoutPacked,    // dO as B of dV (KV pass)
    kKt,            // K^T of the block, packed (B of S)
    kVt,            // V^T of the block, packed (B of dP)
    kKPacked,       // K as B of dQ (query pass)
    kHi,            // P or dS, hi terms ([Bc x stacked] transposed, or [stacked x Bc])
    kLo,            // their lo terms
    kQHi,           // fp16 only: [stacked x d] the terms of Q and of dO
    kQLo,           //
    kDoutHi,        //
    kDoutLo,        //
    kQPackedLo,     // fp16 only: the second terms of the packed operands
    kDoutPackedLo,  //
    kKtLo,          //
    kVtLo,          //
    kKPackedLo,     //
    kRowsHi,        // fp16 only: [Bc x d] the terms of a block's K or V rows before packing
    kRowsLo,        //
  };
  static Scratch buffer_sizes(int64_t query_side, int64_t block, int64_t scores, bool fp16) {
    const int64_t q = Scratch::halves(query_side), b = Scratch::halves(block), sc = Scratch::halves(scores);
    const int64_t fq = fp16 ? q : 0, fb = fp16 ? b : 0;
    return Scratch({q, q, q, q, b, b, b, sc, sc, fq, fq, fq, fq, fq, fq, fb, fb, fb, fb, fb});
  }
  uint16_t* buffer(Buffer b) const { return scratch_.u16(b); }

  const int64_t max_stacked_;
  Scratch scratch_;
  int64_t rows_pad_ = 0, keys_pad_ = 0;
  Bf16Terms q_, dout_, q_packed_, dout_packed_, kt_, vt_, k_packed_;  // operands of the tile and the block
};

// The state one worker reuses across its tasks, and the block math both gradient passes share.
template <typename Products>
class BackwardWorker {
 public:
  template <typename... ProductArgs>
  BackwardWorker(const Problem& p, const TileShape& shape, const RowStats& stats, ProductArgs... product_args)
      : p_(p),
        shape_(shape),
        stats_(stats),
        d_(p.head_dim),
        bc_(shape.block_keys),
        max_stacked_(Products::padded_rows(heads_per_tile(p, shape) * rows_per_tile(p, shape))),
        products_(p, max_stacked_, bc_, product_args...),
        scratch_({max_stacked_ * d_, bc_ * d_, bc_ * d_, max_stacked_ * bc_, max_stacked_ * bc_, max_stacked_ * bc_,
                  max_stacked_, max_stacked_}) {}

  // Q, dO and the row statistics of a query tile.
  void load_query_side(const QueryTile& tile, bool kv_pass) {
    products_.load_query_side(tile, kv_pass);
    for (int64_t g = 0; g < tile.heads; ++g)
      for (int64_t r = 0; r < tile.rows; ++r) {
        const size_t i = size_t((tile.head_begin + g) * stats_.rows +
                                RowStats::flat_row(p_, tile.batch, tile.row_begin + r));
        scratch_[kRowLse][g * tile.rows + r] = stats_.lse_log2[i];
        scratch_[kRowDelta][g * tile.rows + r] = stats_.delta[i];
      }
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
    const float score_scale = products_.scores_and_dp(m, kn, alpha, s, ds, bc_);
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
      products_.probs_and_ds(srow + c0, dsrow + c0, c1 - c0, score_scale, lse[r], delta[r]);
      if (softcap) {
        const float* grow = cap_grad + r * bc_;
        for (int64_t c = c0; c < c1; ++c) dsrow[c] *= grow[c];
      }
    }
  }

  // Pass 2: dK and dV of KV block [k0, k0 + kn) of (b, kv_head).
  void run_kv_block(int64_t b, int64_t kv_head, int64_t k0, int64_t kn) {
    products_.load_kv_block(b, kv_head, k0, kn, /*kv_pass=*/true);
    float* dk = scratch_[kDk];
    float* dv = scratch_[kDv];
    fill_row(dk, bc_ * d_, 0.0f);
    fill_row(dv, bc_ * d_, 0.0f);

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
      load_query_side(tile, /*kv_pass=*/true);
      prefetch_.clear();
      if (Products::kPrefetch && t + 1 < tiles.size()) queue_query_side(tiles[t + 1]);
      block_probs_and_ds(tile, mask, k0, kn);
      products_.accumulate_dkdv(tile.stacked(), kn, scratch_[kP], scratch_[kDs], bc_, dk, dv);
    }

    const float dk_scale = products_.gradient_scale();
    const int64_t k_offset = p_.k_row_offset(b);
    for (int64_t r = 0; r < kn; ++r) {
      store_row(dk + r * d_, d_, dk_scale, p_.dk.ptr, p_.dtype, element_offset(p_.dk, b, k_offset + k0 + r, kv_head));
      store_row(dv + r * d_, d_, 1.0f, p_.dv.ptr, p_.dtype, element_offset(p_.dv, b, k_offset + k0 + r, kv_head));
    }
  }

  // Pass 3: dQ of one query tile.
  void run_query_tile(const QueryTile& tile) {
    const int64_t m = tile.stacked();
    float* dq = scratch_[kDq];
    fill_row(dq, Products::padded_rows(m) * d_, 0.0f);
    load_query_side(tile, /*kv_pass=*/false);
    const core::MaskSpec mask = p_.mask(tile.batch);
    const int64_t len_k = p_.len_k(tile.batch);
    const int64_t k_offset = p_.k_row_offset(tile.batch);
    const core::BlockRange blocks = core::kv_block_range(mask, tile.row_begin, tile.row_end(), bc_);
    for (int64_t j = blocks.first; j < blocks.last; ++j) {
      const int64_t k0 = j * bc_;
      const int64_t kn = std::min(bc_, len_k - k0);
      products_.load_kv_block(tile.batch, tile.kv_head, k0, kn, /*kv_pass=*/false);
      prefetch_.clear();
      if (Products::kPrefetch && j + 1 < blocks.last) {
        const int64_t next_rows = std::min(bc_, len_k - k0 - bc_);
        prefetch_.add(RowPrefetcher(p_, p_.k, tile.batch, k_offset + k0 + bc_, next_rows, tile.kv_head));
        prefetch_.add(RowPrefetcher(p_, p_.v, tile.batch, k_offset + k0 + bc_, next_rows, tile.kv_head));
      }
      block_probs_and_ds(tile, mask, k0, kn);
      products_.accumulate_dq(m, kn, scratch_[kDs], bc_, dq);
    }
    const float dq_scale = products_.gradient_scale();
    if (dq_scale != 1.0f) scale_row(dq, m * d_, dq_scale);
    store_stacked(p_, dq, nullptr, tile, p_.dq);
  }

 private:
  enum Buffer : size_t {
    kDq,        // [stacked x d] dQ accumulator (query pass)
    kDk,        // [Bc x d] dK accumulator (KV pass)
    kDv,        // [Bc x d] dV accumulator (KV pass)
    kP,         // [stacked x Bc] scores, then probabilities
    kDs,        // [stacked x Bc] dP, then dS
    kCapGrad,   // [stacked x Bc] softcap derivative at the capped score
    kRowLse,    // [stacked] LSE (log2) of the stacked rows
    kRowDelta,  // [stacked] D of the stacked rows
  };

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
  Products products_;
  Scratch scratch_;
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

template <typename Products, typename... ProductArgs>
Status run_gradient_passes(const Problem& p, const TileShape& shape, int workers, const RowStats& stats,
                           ProductArgs... product_args) {
  const std::vector<KvBlock> kv_blocks = make_kv_blocks(p, shape);
  if (!kv_blocks.empty()) {
    Status s = run_workers(resolve_worker_count(workers, int64_t(kv_blocks.size())), int64_t(kv_blocks.size()),
                           [&](TaskQueue& queue) {
                             BackwardWorker<Products> worker(p, shape, stats, product_args...);
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
                       BackwardWorker<Products> worker(p, shape, stats, product_args...);
                       int64_t t = 0;
                       while (queue.pop(&t)) worker.run_query_tile(tiles[size_t(t)]);
                       return Status::Ok();
                     });
}

}  // namespace

Status run_backward(const Problem& p, const TileShape& shape, int workers) {
  RowStats stats;
  Status s = prepare_row_stats(p, workers, &stats);
  if (!s.ok()) return s;
  const Bf16Products products = tile_products(p);
  if (products == Bf16Products::kFp32) return run_gradient_passes<Fp32BackwardProducts>(p, shape, workers, stats);
  return run_gradient_passes<Bf16BackwardProducts>(p, shape, workers, stats, products);
}

}  // namespace flashattn::detail::cpu
