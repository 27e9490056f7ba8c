// Query tiling shared by the forward and backward CPU kernels.
#include "cpu/tiling.h"

#include <algorithm>
#include <cstring>

#include "cpu/tile_io.h"

namespace flashattn::detail::cpu {

int64_t heads_per_tile(const Problem& p, const TileShape& shape) {
  return std::max<int64_t>(1, std::min(p.group(), shape.stacked_rows));
}

int64_t rows_per_tile(const Problem& p, const TileShape& shape) {
  return std::max<int64_t>(1, shape.stacked_rows / heads_per_tile(p, shape));
}

int64_t count_query_tiles(const Problem& p, const TileShape& shape) {
  const int64_t chunk = heads_per_tile(p, shape);
  const int64_t rows = rows_per_tile(p, shape);
  int64_t row_tiles = 0;
  for (int64_t b = 0; b < p.batch; ++b) row_tiles += (p.len_q(b) + rows - 1) / rows;
  return row_tiles * p.heads_kv * ((p.group() + chunk - 1) / chunk);
}

std::vector<QueryTile> make_query_tiles(const Problem& p, const TileShape& shape) {
  const int64_t group = p.group();
  const int64_t chunk = heads_per_tile(p, shape);
  const int64_t rows = rows_per_tile(p, shape);
  std::vector<QueryTile> tiles;
  std::vector<int64_t> cost;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len_q = p.len_q(b);
    const core::MaskSpec mask = p.mask(b);
    for (int64_t r0 = 0; r0 < len_q; r0 += rows) {
      const int64_t r1 = std::min(len_q, r0 + rows);
      const core::BlockRange range = core::kv_block_range(mask, r0, r1, shape.block_keys);
      // One unit for writing the tile plus one per KV block it visits.
      const int64_t blocks = 1 + (range.empty() ? 0 : range.last - range.first);
      for (int64_t hk = 0; hk < p.heads_kv; ++hk)
        for (int64_t g0 = 0; g0 < group; g0 += chunk) {
          QueryTile t;
          t.batch = b;
          t.kv_head = hk;
          t.head_begin = hk * group + g0;
          t.heads = std::min(chunk, group - g0);
          t.row_begin = r0;
          t.rows = r1 - r0;
          tiles.push_back(t);
          cost.push_back(blocks * t.stacked());
        }
    }
  }
  std::vector<size_t> order(tiles.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<QueryTile> sorted;
  sorted.reserve(tiles.size());
  for (size_t i : order) sorted.push_back(tiles[i]);
  return sorted;
}

void load_stacked(const Problem& p, const Strided& t, const QueryTile& tile, float* dst) {
  const int64_t row_offset = p.q_row_offset(tile.batch);
  for (int64_t g = 0; g < tile.heads; ++g)
    load_rows(p, t, tile.batch, row_offset, tile.row_begin, tile.rows, tile.head_begin + g,
              dst + g * tile.rows * p.head_dim);
}

void copy_stacked_u16(const Problem& p, const Strided& t, const QueryTile& tile, int64_t rows_pad, uint16_t* dst) {
  const int64_t row_offset = p.q_row_offset(tile.batch);
  const size_t row_bytes = size_t(p.head_dim) * sizeof(uint16_t);
  for (int64_t g = 0; g < tile.heads; ++g)
    for (int64_t r = 0; r < tile.rows; ++r)
      std::memcpy(dst + (g * tile.rows + r) * p.head_dim,
                  row_u16(t, tile.batch, row_offset + tile.row_begin + r, tile.head_begin + g), row_bytes);
  std::memset(dst + tile.stacked() * p.head_dim, 0, size_t(rows_pad - tile.stacked()) * row_bytes);
}

void store_stacked(const Problem& p, const float* src, const float* factors, const QueryTile& tile,
                   const Strided& t) {
  const int64_t row_offset = p.q_row_offset(tile.batch);
  for (int64_t g = 0; g < tile.heads; ++g)
    for (int64_t r = 0; r < tile.rows; ++r) {
      const int64_t s = g * tile.rows + r;
      store_row(src + s * p.head_dim, p.head_dim, factors ? factors[s] : 1.0f, t.ptr, p.dtype,
                element_offset(t, tile.batch, row_offset + tile.row_begin + r, tile.head_begin + g));
    }
}

}  // namespace flashattn::detail::cpu
