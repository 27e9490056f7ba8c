// What the forward's and the backward's bf16 tile products (cpu_fwd.cpp, cpu_bwd.cpp) share: the problem's
// element form, the tile configuration of the thread that runs them, and the bf16 terms of a tile's rows.
#pragma once

#include <cstdint>

#include "api/problem.h"
#include "cpu/bf16_tiles.h"
#include "cpu/tile_io.h"

namespace flashattn::detail::cpu {

class Bf16Operands {
 protected:
  Bf16Operands(const Problem& p, int64_t bc, Bf16Products products)
      : p_(p), d_(p.head_dim), bc_(bc), fp16_(p.dtype == DType::kFloat16), products_(products), tiles_(products) {}

  // Rows [0, count) (row stride ld) of the inputs' 16-bit form as terms (bf16_terms; fp16 rows split into hi
  // and lo).
  Bf16Terms terms(const uint16_t* rows, int64_t ld, int64_t count, uint16_t* hi, uint16_t* lo) const {
    return bf16_terms(products_, fp16_, rows, ld, count, d_, hi, lo);
  }
  // Rows [row, row + count) of one head of t (K or V; absolute rows), read in place, as terms.
  Bf16Terms rows_terms(const Strided& t, int64_t b, int64_t row, int64_t head, int64_t count, uint16_t* hi,
                       uint16_t* lo) const {
    return terms(row_u16(t, b, row, head), t.row_stride, count, hi, lo);
  }

  const Problem& p_;
  const int64_t d_;
  const int64_t bc_;  // keys per block
  const bool fp16_;
  const Bf16Products products_;
  Bf16TileScope tiles_;
};

}  // namespace flashattn::detail::cpu
