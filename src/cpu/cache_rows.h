// Products of a few query rows with K and V rows read where they lie in a KV cache (the CPU decode kernel).
//
// With one or a few query rows per KV head, each K/V element takes part in a handful of multiply-adds, so
// converting a block of cache rows to fp32 buffers first (as the tile products need) costs more than the
// products themselves. These kernels read the cache rows in place and widen them in registers:
// - scores: 4 keys x 4 query rows per step, 16 running sums over head_dim, reduced in one shuffle tree;
//   for bf16 rows the AVX-512 BF16 dot product multiplies the bf16 pairs directly (the query rows are packed
//   to bf16 once; a bf16 query loses nothing);
// - P V: 8 keys per step, each V row widened once per 64 columns and multiplied into 4 rows of fp32
//   accumulators (bf16 rows into an even/odd column order, see cache_accumulate).
// A block names its keys by one row pointer each (paged and contiguous caches alike), and the KV heads of a
// group by a fixed byte step from that pointer. Both kernels loop over blocks of 4 query rows (one block at
// decode's usual row counts), then the steps of keys, then the KV heads, so the rows of one key (contiguous
// in the [.., heads_kv, d] layout) are read together.
#pragma once

#include <cstdint>

#include "api/problem.h"

namespace flashattn::detail::cpu {

// AVX-512 with BF16 dot products (bf16 rows; others as kAvx512), AVX-512 (F, BW, VL; rows widened in
// registers) and portable loops.
enum class CacheRowsImpl { kAvx512Bf16, kAvx512, kPortable };
const char* cache_rows_impl_name(CacheRowsImpl impl);  // "avx512bf16", "avx512" or "portable"
// Whether this build and this CPU run `impl` (portable: always).
bool cache_rows_impl_available(CacheRowsImpl impl);
// The fastest available for rows of `dtype` (kAvx512Bf16 only for bf16).
CacheRowsImpl cache_rows_best_impl(DType dtype);

// One block of keys of a group of consecutive KV heads: key i's row of the group's first head starts at
// rows[i]; head h's at rows[i] + h * head_bytes. Elements are of `dtype` (fp32, fp16 or bf16), d per row.
struct CacheBlock {
  DType dtype = DType::kBFloat16;
  const char* const* rows = nullptr;
  int64_t head_bytes = 0;
  int64_t heads = 0;
  int64_t keys = 0;
  int64_t d = 0;
};

// Elements per packed query row (d rounded up for the bf16 pairs), and its bytes per element.
int64_t cache_query_stride(CacheRowsImpl impl, DType dtype, int64_t d);
int64_t cache_query_elem_bytes(CacheRowsImpl impl, DType dtype);
// The query rows of every head (`rows` rows of d fp32 values, head h's at q + h * q_head_stride) as
// cache_scores reads them: head h's rows at dst + h * rows * stride elements, rows `stride` apart, padded
// with zeros. dst holds heads * rows * stride elements of cache_query_elem_bytes.
void cache_query_pack(CacheRowsImpl impl, DType dtype, const float* q, int64_t q_head_stride, int64_t heads,
                      int64_t rows, int64_t d, void* dst);

// For every head h, query row r < m and key i < block.keys:
//   s[h * s_head_stride + r * lds + i] = alpha * (q_h[r] . K_h[i])
// with q packed by cache_query_pack (same impl, same m).
void cache_scores(CacheRowsImpl impl, const CacheBlock& block, const void* q, int64_t m, float alpha, float* s,
                  int64_t s_head_stride, int64_t lds);

// For every head h, row r < m and column x < d:
//   o[h * o_head_stride + r * d + x] += sum_i p[h * p_head_stride + r * ldp + i] * V_h[i][x]
// except where cache_output_interleaved says so: then the accumulator rows hold each group of 32 columns
// as its 16 even columns followed by its 16 odd ones (bf16 values widen that way without a shuffle), the
// same layout in and out; cache_output_deinterleave gives a row back in column order.
void cache_accumulate(CacheRowsImpl impl, const CacheBlock& block, const float* p, int64_t p_head_stride,
                      int64_t ldp, int64_t m, float* o, int64_t o_head_stride);

bool cache_output_interleaved(CacheRowsImpl impl, DType dtype, int64_t d);
// dst[x] = column x of the interleaved row src (d a multiple of 32); dst and src must not overlap.
void cache_output_deinterleave(const float* src, int64_t d, float* dst);

}  // namespace flashattn::detail::cpu
