// Step 1 of a KV-cache call on the GPU: k_new / v_new into the cache slots cache_seqlens[b] .. + seqlen_new - 1,
// on the caller's stream before the attention kernel. Same dtype on both sides, so elements are copied as
// raw 16-bit words; any stride works (no alignment needed).
#pragma once

#include <cstdint>

#include "cuda/common/problem_params.cuh"
#include "cuda/decode/decode_config.cuh"

namespace flashattn::cuda::decode {

struct AppendParams {
  TensorParams k_new, v_new;
  CacheParams k_cache, v_cache;
  const int32_t* cache_seqlens;
  const int32_t* block_table;  // nullptr: contiguous cache
  int64_t block_table_row_stride;
  int64_t page_size;
  IndexLimits limits;
  int64_t batch, seqlen_new, heads_kv, head_dim;
};

// One thread per element, grid-stride: (b, t, h, d) with d fastest, so a warp's stores land in one row.
__global__ void append_new_tokens_kernel(const AppendParams a) {
  const int64_t total = a.batch * a.seqlen_new * a.heads_kv * a.head_dim;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = idx;
    const int64_t d = rest % a.head_dim;
    rest /= a.head_dim;
    const int64_t h = rest % a.heads_kv;
    rest /= a.heads_kv;
    const int64_t t = rest % a.seqlen_new;
    const int64_t b = rest / a.seqlen_new;
    const int64_t pos = a.limits.cached(a.cache_seqlens, int(b)) + t;
    const int32_t* table_row = a.block_table != nullptr ? a.block_table + b * a.block_table_row_stride : nullptr;
    const int64_t k_dst = token_offset(a.k_cache, table_row, a.page_size, a.limits, b, pos);
    const int64_t v_dst = token_offset(a.v_cache, table_row, a.page_size, a.limits, b, pos);
    // Raw 16-bit words: both sides have the same dtype.
    static_cast<uint16_t*>(a.k_cache.ptr)[k_dst + h * a.k_cache.head_stride + d] = static_cast<const uint16_t*>(
        a.k_new.ptr)[b * a.k_new.batch_stride + t * a.k_new.row_stride + h * a.k_new.head_stride + d];
    static_cast<uint16_t*>(a.v_cache.ptr)[v_dst + h * a.v_cache.head_stride + d] = static_cast<const uint16_t*>(
        a.v_new.ptr)[b * a.v_new.batch_stride + t * a.v_new.row_stride + h * a.v_new.head_stride + d];
  }
}

}  // namespace flashattn::cuda::decode
