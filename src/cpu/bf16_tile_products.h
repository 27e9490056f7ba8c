// The bf16 tile products of the forward kernel (cpu_fwd.cpp), shared with the decode kernel's tiles of many
// rows (cpu_decode.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "api/problem.h"
#include "cpu/bf16_operands.h"
#include "cpu/bf16_tiles.h"
#include "cpu/row_ops.h"
#include "cpu/scratch.h"
#include "cpu/tile_io.h"
#include "cpu/tile_softmax.h"
#include "cpu/tiling.h"

namespace flashattn::detail::cpu {

// Bf16TileProducts: bf16 and fp16 inputs multiplied on AMX (or its portable emulation) as bf16 terms: bf16
// values as they are, fp16 values split exactly into two terms (bf16_terms), so that every product of the
// inputs is exact in fp32 either way. Q rows copied, each K/V block packed once per tile, and the softmax
// writes P as two bf16 terms (hi + lo, see exp2_split_row) for the P V product. Every dimension is padded to
// 32: rows of Q and P past the tile and keys past the block are zero, so the padded scores are 0 and the
// padded P V terms vanish (each row of the products depends on its own row only, so the padding could not
// reach a real row anyway; zeros keep it finite). Needs head_dim % 32 == 0 and a block of a multiple of 32
// keys.
class Bf16TileProducts : Bf16Operands {
 public:
  Bf16TileProducts(const Problem& p, int64_t max_stacked, int64_t bc, Bf16Products products)
      : Bf16Operands(p, bc, products),
        scratch_({Scratch::halves(max_stacked * d_), Scratch::halves(bc * d_), Scratch::halves(bc * d_),
                  Scratch::halves(max_stacked * bc), Scratch::halves(max_stacked * bc),
                  // the terms of fp16 inputs
                  fp16_ ? Scratch::halves(max_stacked * d_) : 0, fp16_ ? Scratch::halves(max_stacked * d_) : 0,
                  fp16_ ? Scratch::halves(bc * d_) : 0, fp16_ ? Scratch::halves(bc * d_) : 0,
                  fp16_ ? Scratch::halves(bc * d_) : 0, fp16_ ? Scratch::halves(bc * d_) : 0}) {}

  // Rows the products touch for a tile of `rows` rows: whole 32-row blocks.
  static int64_t padded_rows(int64_t rows) { return round_up_to_tile(rows); }
  // The software prefetches of the next block measured 0-4% slower here: the block is read by the packing
  // at once, row after row, and the prefetch instructions stalled on the line fill buffers.
  static constexpr bool kPrefetchNextBlock = false;

  // P's two terms, one bf16 row per score row, written by the softmax.
  class Probabilities {
   public:
    Probabilities(const float* s, int64_t lds, uint16_t* hi, uint16_t* lo, int64_t ld, int64_t n_pad,
                  Bf16Products products)
        : s_(s), lds_(lds), hi_(hi), lo_(lo), ld_(ld), n_pad_(n_pad), products_(products) {}
    void none(int64_t r) {
      std::memset(hi_ + r * ld_, 0, size_t(n_pad_) * sizeof(uint16_t));
      std::memset(lo_ + r * ld_, 0, size_t(n_pad_) * sizeof(uint16_t));
    }
    float exp(int64_t r, ColumnRange cols, float scale, float shift) {
      return exp2_split_row(products_, s_ + r * lds_, n_pad_, cols.begin, cols.end, scale, shift, hi_ + r * ld_,
                            lo_ + r * ld_);
    }

   private:
    const float* s_;
    int64_t lds_;
    uint16_t *hi_, *lo_;
    int64_t ld_, n_pad_;
    Bf16Products products_;
  };

  void load_q(const QueryTile& tile) {
    const int64_t m = tile.stacked();
    rows_pad_ = padded_rows(m);
    copy_stacked_u16(p_, p_.q, tile, rows_pad_, buffer(kQ));
    q_ = terms(buffer(kQ), d_, rows_pad_, buffer(kQHi), buffer(kQLo));
    // The softmax writes P rows [0, m) only.
    const size_t pad_bytes = size_t((rows_pad_ - m) * bc_) * sizeof(uint16_t);
    std::memset(buffer(kPHi) + m * bc_, 0, pad_bytes);
    std::memset(buffer(kPLo) + m * bc_, 0, pad_bytes);
  }

  // The block's keys [k0, k0 + kn) of the problem's K and V.
  void load_kv(const QueryTile& tile, int64_t k_offset, int64_t k0, int64_t kn) {
    const int64_t row = k_offset + k0;
    load_kv_rows(row_u16(p_.k, tile.batch, row, tile.kv_head), p_.k.row_stride,
                 row_u16(p_.v, tile.batch, row, tile.kv_head), p_.v.row_stride, kn);
  }

  // A block of kn keys from rows of the inputs' 16-bit form: key r's K row at k + r * ldk, its V row at
  // v + r * ldv.
  void load_kv_rows(const uint16_t* k, int64_t ldk, const uint16_t* v, int64_t ldv, int64_t kn) {
    keys_pad_ = round_up_to_tile(kn);
    kt_ = pack_kt_terms(products_, terms(k, ldk, kn, buffer(kRowsHi), buffer(kRowsLo)), kn, keys_pad_, d_,
                        buffer(kK), buffer(kKLo));
    v_ = pack_v_terms(products_, terms(v, ldv, kn, buffer(kRowsHi), buffer(kRowsLo)), kn, keys_pad_, d_,
                      buffer(kV), buffer(kVLo));
  }

  // s[rows_pad x keys_pad] = Q K^T. The exponentials fold in a positive alpha without softcap (the return
  // value); otherwise the m x kn scores are scaled here and 1 is returned.
  float scores(int64_t m, int64_t kn, float alpha, float* s, int64_t lds) {
    bf16_gemm(products_, rows_pad_, keys_pad_, d_, q_, kt_, /*accumulate=*/false, s, lds);
    if (alpha > 0.0f && p_.softcap <= 0.0f) return alpha;
    for (int64_t r = 0; r < m; ++r) scale_row(s + r * lds, kn, alpha);
    return 1.0f;
  }

  Probabilities probabilities(const float* s, int64_t lds, int64_t /*kn*/) {
    return {s, lds, buffer(kPHi), buffer(kPLo), bc_, keys_pad_, products_};
  }

  // o[rows_pad x d] += P V with P = hi + lo.
  void accumulate(int64_t /*m*/, int64_t /*kn*/, const float* /*s*/, int64_t /*lds*/, float* o) {
    bf16_gemm(products_, rows_pad_, d_, keys_pad_, Bf16Terms{buffer(kPHi), buffer(kPLo), bc_}, v_,
              /*accumulate=*/true, o, d_);
  }

 private:
  enum Buffer : size_t {
    kQ,       // [stacked x d] query rows as stored (bf16 or fp16)
    kK,       // K^T of the block, packed (the first term of fp16 keys)
    kV,       // V of the block, packed
    kPHi,     // [stacked x Bc] P rounded to bf16
    kPLo,     // [stacked x Bc] P - hi rounded to bf16
    kQHi,     // fp16 only: [stacked x d] the query rows' terms
    kQLo,     //
    kKLo,     // fp16 only: the second terms of K^T and V, packed
    kVLo,     //
    kRowsHi,  // fp16 only: the terms of a block's K or V rows before packing
    kRowsLo,  //
  };
  uint16_t* buffer(Buffer b) const { return scratch_.u16(b); }

  Scratch scratch_;
  int64_t rows_pad_ = 0;
  int64_t keys_pad_ = 0;
  Bf16Terms q_, kt_, v_;  // the operands of the current tile and block
};

}  // namespace flashattn::detail::cpu
