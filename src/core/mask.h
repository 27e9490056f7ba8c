// Which keys a query row may attend to, and which KV blocks a query tile must visit.
//
// Rows and keys are indexed within one sequence. With seqlen_q != seqlen_k the mask is aligned
// bottom-right (FlashAttention 2.1+): query row i sits at key position i + (seqlen_k - seqlen_q).
// Key j is visible to row i when  pos(i) - window_left <= j <= pos(i) + window_right  and 0 <= j < seqlen_k,
// where a negative window side means unbounded and causal means window_right = 0.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace flashattn::core {

struct MaskSpec {
  int64_t seqlen_q = 0;
  int64_t seqlen_k = 0;
  int64_t window_left = -1;   // < 0: unbounded
  int64_t window_right = -1;  // < 0: unbounded; causal folds into 0

  FA_HOST_DEVICE static MaskSpec make(int64_t seqlen_q, int64_t seqlen_k, bool causal, int64_t window_left,
                                      int64_t window_right) {
    MaskSpec m;
    m.seqlen_q = seqlen_q;
    m.seqlen_k = seqlen_k;
    m.window_left = window_left < 0 ? -1 : window_left;
    // Causal is a window with no keys right of the diagonal, whatever window_right says.
    m.window_right = causal ? 0 : (window_right < 0 ? -1 : window_right);
    return m;
  }

  FA_HOST_DEVICE bool has_left() const { return window_left >= 0; }
  FA_HOST_DEVICE bool has_right() const { return window_right >= 0; }
  FA_HOST_DEVICE bool is_masked() const { return has_left() || has_right(); }

  // Key position that row i lines up with.
  FA_HOST_DEVICE int64_t diag(int64_t row) const { return row + seqlen_k - seqlen_q; }

  // Visible keys of row i: [key_begin(i), key_end(i)), possibly empty (begin >= end).
  FA_HOST_DEVICE int64_t key_begin(int64_t row) const {
    int64_t b = has_left() ? diag(row) - window_left : 0;
    return b < 0 ? 0 : (b > seqlen_k ? seqlen_k : b);
  }
  FA_HOST_DEVICE int64_t key_end(int64_t row) const {
    int64_t e = has_right() ? diag(row) + window_right + 1 : seqlen_k;
    return e < 0 ? 0 : (e > seqlen_k ? seqlen_k : e);
  }
  FA_HOST_DEVICE bool visible(int64_t row, int64_t key) const {
    return key >= key_begin(row) && key < key_end(row);
  }

  // Keys any row of [row_begin, row_end) may see: [begin, end). Empty when row_begin >= row_end.
  // key_begin and key_end are monotone in the row, so the first and last rows bound the tile.
  FA_HOST_DEVICE int64_t tile_key_begin(int64_t row_begin) const { return key_begin(row_begin); }
  FA_HOST_DEVICE int64_t tile_key_end(int64_t row_end) const { return key_end(row_end - 1); }

  // True when every (row, key) of the tile is visible, so the tile needs no per-element mask.
  // Out-of-range keys (>= seqlen_k) count as masked.
  FA_HOST_DEVICE bool tile_fully_visible(int64_t row_begin, int64_t row_end, int64_t key_begin_,
                                         int64_t key_end_) const {
    if (key_end_ > seqlen_k) return false;
    // The last row has the largest key_begin; the first row has the smallest key_end.
    return key_begin(row_end - 1) <= key_begin_ && key_end(row_begin) >= key_end_;
  }
};

// MaskSpec's visible keys in 32-bit arithmetic, for kernels that hold lengths and windows as ints: the same
// key_begin and key_end as MaskSpec's for every row below seqlen_q, when seqlen_q + seqlen_k + 2^8 < 2^31
// (rows past seqlen_q, which padded tiles compute and discard, may get a begin past seqlen_k where MaskSpec
// clamps it: an empty range either way).
struct MaskSpec32 {
  // The lengths it holds: seqlen_q + seqlen_k up to this (padded tiles add fewer than 2^8 rows). Hosts of
  // kernels that use it refuse longer problems.
  static constexpr int64_t kMaxLengthSum = int64_t(INT32_MAX) - 256;
  FA_HOST_DEVICE static constexpr bool holds(int64_t seqlen_q, int64_t seqlen_k) {
    return seqlen_q + seqlen_k <= kMaxLengthSum;
  }

  int shift = 0;          // seqlen_k - seqlen_q: row i lines up with key i + shift
  int seqlen_k = 0;
  int window_left = -1;   // < 0: unbounded
  int window_right = -1;  // < 0: unbounded; causal folds into 0; at most seqlen_q

  FA_HOST_DEVICE static MaskSpec32 make(int seqlen_q, int seqlen_k, bool causal, int window_left,
                                        int window_right) {
    MaskSpec32 m;
    m.shift = seqlen_k - seqlen_q;
    m.seqlen_k = seqlen_k;
    m.window_left = window_left < 0 ? -1 : window_left;
    // A right window of seqlen_q or more reaches seqlen_k from every row; clamped to seqlen_q, the key
    // bound diag + window_right + 1 stays below seqlen_q + seqlen_k plus the padded rows.
    m.window_right = causal ? 0 : (window_right < 0 ? -1 : (window_right < seqlen_q ? window_right : seqlen_q));
    return m;
  }

  // diag - window_left is formed only where it is positive; diag + window_right + 1 fits (above).
  FA_HOST_DEVICE int key_begin(int row) const {
    const int diag = row + shift;
    return window_left >= 0 && diag > window_left ? diag - window_left : 0;
  }
  FA_HOST_DEVICE int key_end(int row) const {
    if (window_right < 0) return seqlen_k;
    const int e = row + shift + window_right + 1;
    return e < 0 ? 0 : (e > seqlen_k ? seqlen_k : e);
  }
  // Key blocks of block_n keys [0, n) hold every key that rows up to `row` see (key_end never falls as the
  // row grows); blocks from n on are masked for all of them.
  FA_HOST_DEVICE int blocks_seen_up_to(int row, int block_n) const { return (key_end(row) + block_n - 1) / block_n; }
};

// KV blocks of size block_n that a query tile [row_begin, row_end) must visit: [first, last).
struct BlockRange {
  int64_t first = 0;
  int64_t last = 0;
  FA_HOST_DEVICE bool empty() const { return first >= last; }
};

FA_HOST_DEVICE BlockRange kv_block_range(const MaskSpec& mask, int64_t row_begin, int64_t row_end,
                                         int64_t block_n) {
  BlockRange r;
  if (row_begin >= row_end) return r;
  int64_t kb = mask.tile_key_begin(row_begin);
  int64_t ke = mask.tile_key_end(row_end);
  if (kb >= ke) return r;
  r.first = kb / block_n;
  r.last = (ke + block_n - 1) / block_n;
  return r;
}

}  // namespace flashattn::core
