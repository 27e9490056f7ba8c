// How the CPU kernels cut an attention problem into tiles, and the pieces both passes share.
//
// A query tile stacks the rows of several query heads that read the same KV head (GQA/MQA), so one
// converted K/V block serves all of them and the tile products have more rows:
//   stacked row s = g * rows + r  holds query head head_begin + g, sequence row row_begin + r.
#pragma once

#include <cstdint>
#include <vector>

#include "api/problem.h"
#include "core/mask.h"

namespace flashattn::detail::cpu {

struct TileShape {
  int64_t stacked_rows = 0;  // query rows per tile, all stacked heads together (Br)
  int64_t block_keys = 0;    // keys per KV block (Bc)
};

struct QueryTile {
  int64_t batch = 0;
  int64_t kv_head = 0;
  int64_t head_begin = 0;  // first query head (of kv_head's group)
  int64_t heads = 0;       // query heads stacked
  int64_t row_begin = 0;   // first sequence row
  int64_t rows = 0;        // sequence rows per head
  int64_t stacked() const { return heads * rows; }
  int64_t row_end() const { return row_begin + rows; }
};

// Query heads stacked per tile (a chunk of the group) and sequence rows per head, for a target of
// shape.stacked_rows stacked rows.
int64_t heads_per_tile(const Problem& p, const TileShape& shape);
int64_t rows_per_tile(const Problem& p, const TileShape& shape);

// How many query tiles make_query_tiles returns, without building them.
int64_t count_query_tiles(const Problem& p, const TileShape& shape);

// Every query tile of the problem (sequences of length 0 have none), the most expensive first so a
// dynamic schedule ends with the small ones (causal and windowed tiles differ in cost).
std::vector<QueryTile> make_query_tiles(const Problem& p, const TileShape& shape);

// The rows of `tile` in tensor t (q, out, dout or dq) into a stacked [tile.stacked() x head_dim] tile.
void load_stacked(const Problem& p, const Strided& t, const QueryTile& tile, float* dst);
// The same rows of a 16-bit tensor copied as they are (bf16 operands), then zero rows up to rows_pad.
void copy_stacked_u16(const Problem& p, const Strided& t, const QueryTile& tile, int64_t rows_pad, uint16_t* dst);
// The stacked tile back into tensor t, each row multiplied by factors[s] (nullptr: by 1).
void store_stacked(const Problem& p, const float* src, const float* factors, const QueryTile& tile,
                   const Strided& t);

// The keys of block [key_begin, key_begin + keys) that sequence row `row` sees, as columns of the block.
struct ColumnRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool empty() const { return begin >= end; }
};
inline ColumnRange visible_columns(const core::MaskSpec& mask, int64_t row, int64_t key_begin, int64_t keys) {
  ColumnRange c;
  const int64_t b = mask.key_begin(row) - key_begin;
  const int64_t e = mask.key_end(row) - key_begin;
  c.begin = b < 0 ? 0 : (b > keys ? keys : b);
  c.end = e < c.begin ? c.begin : (e > keys ? keys : e);
  return c;
}

}  // namespace flashattn::detail::cpu
