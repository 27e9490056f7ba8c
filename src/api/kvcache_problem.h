// The validated, normalized form of one KV-cache (decode) call, as the backends receive it.
//
// q, out, k_new, v_new and lse use the addressing of detail::Problem (batch_stride, row_stride,
// head_stride; no varlen row offsets). A cache row is addressed by cache_row(b, t): the element offset
// of token t of sequence b, head 0, dim 0; add head * cache.head_stride + d (cache_row(b, t, head) adds
// the head).
#pragma once

#include <cstdint>
#include <vector>

#include "api/problem.h"
#include "core/mask.h"
#include "flashattn/kvcache.h"

namespace flashattn::detail {

struct CacheStrided {
  void* ptr = nullptr;
  int64_t outer_stride = 0;  // elements between sequences (contiguous) or pages (paged)
  int64_t row_stride = 0;    // between tokens of a sequence (contiguous) or slots of a page (paged)
  int64_t head_stride = 0;
};

struct KVCacheProblem {
  DType dtype = DType::kFloat32;
  Device device = Device::kCPU;
  int device_index = 0;

  int64_t batch = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t head_dim = 0;
  int64_t seqlen_q = 0;
  int64_t seqlen_new = 0;  // 0 without k_new / v_new

  bool paged = false;
  int64_t page_size = 0;          // paged: slots per page
  int64_t num_pages = 0;          // paged: pages in the cache tensors
  int64_t max_pages_per_seq = 0;  // paged: columns of the block table
  int64_t capacity = 0;           // tokens a sequence can hold: max_seqlen, or max_pages_per_seq * page_size

  // Validated host copies of the index tensors (read by host code and CPU kernels), and the caller's
  // pointers (read by device kernels). block_table is stored densely: entry (b, i) at b * max_pages_per_seq + i.
  // indices_on_host false (check_indices off, CUDA indices): the host copies are empty and only the
  // device pointers exist; len_k, mask and cache_row must not be called then.
  bool indices_on_host = true;
  std::vector<int32_t> cache_seqlens;
  std::vector<int32_t> block_table;
  const int32_t* device_cache_seqlens = nullptr;
  const int32_t* device_block_table = nullptr;
  int64_t device_block_table_row_stride = 0;

  Strided q, out, lse, k_new, v_new;
  CacheStrided k_cache, v_cache;

  float scale = 0.0f;  // resolved: never 0
  float softcap = 0.0f;
  bool causal = false;
  int64_t window_left = -1;
  int64_t window_right = -1;
  int num_splits = 0;  // 0: the backend chooses

  Backend backend = Backend::kAuto;
  Algorithm algorithm = Algorithm::kAuto;
  int num_threads = 0;
  void* stream = nullptr;

  int64_t group() const { return heads_q / heads_kv; }
  bool has_new() const { return k_new.present(); }
  // Keys sequence b attends over: the cached tokens plus the appended ones.
  int64_t len_k(int64_t b) const { return int64_t(cache_seqlens[size_t(b)]) + seqlen_new; }
  // The longest sequence's keys; without host copies of the lengths, the most any sequence can have.
  int64_t max_len_k() const {
    if (!indices_on_host) return capacity;
    int64_t m = 0;
    for (int64_t b = 0; b < batch; ++b) m = len_k(b) > m ? len_k(b) : m;
    return m;
  }
  core::MaskSpec mask(int64_t b) const {
    return core::MaskSpec::make(seqlen_q, len_k(b), causal, window_left, window_right);
  }
  // Element offset of token t of sequence b (head 0, dim 0) in a cache with the given strides.
  int64_t cache_row(const CacheStrided& c, int64_t b, int64_t t) const {
    if (!paged) return b * c.outer_stride + t * c.row_stride;
    const int64_t page = block_table[size_t(b * max_pages_per_seq + t / page_size)];
    return page * c.outer_stride + (t % page_size) * c.row_stride;
  }
  // The element offset of KV head `head`'s row of token t of sequence b.
  int64_t cache_row(const CacheStrided& c, int64_t b, int64_t t, int64_t head) const {
    return cache_row(c, b, t) + head * c.head_stride;
  }
};

// Checks every rule of the KV-cache API that does not depend on the backend and fills `problem`.
// Nothing is written to any tensor.
Status make_kvcache_problem(const KVCacheArgs& args, KVCacheProblem* problem);

}  // namespace flashattn::detail
