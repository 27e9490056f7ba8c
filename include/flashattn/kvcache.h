// Attention over a KV cache (decode, Flash-Decoding): new query tokens attend to the tokens already in
// a cache plus the ones this call appends, with the keys of each sequence split into chunks that run in
// parallel and are merged through their log-sum-exps.
//
// Layout (as flash-attn's flash_attn_with_kvcache):
//   q              [batch, seqlen_q, heads_q, head_dim]           the new queries (seqlen_q >= 1 tokens)
//   k_cache, v_cache  contiguous [batch, max_seqlen, heads_kv, head_dim]
//                  or paged     [num_pages, page_size, heads_kv, head_dim] (with block_table)
//   cache_seqlens  int32 [batch]: tokens already in the cache of each sequence before this call
//   block_table    int32 [batch, max_pages_per_seq]: present => paged cache. Token t of sequence b lives in
//                  page block_table[b][t / page_size], slot t % page_size. Any page_size >= 1.
//   k_new, v_new   optional [batch, seqlen_new, heads_kv, head_dim]: written into the cache at positions
//                  cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 BEFORE the attention (in place;
//                  no other element of either cache is written)
//   out            like q;  lse optional float32 [batch, heads_q, seqlen_q], natural log
// The last dimension of every tensor must be contiguous; other strides are free (in elements).
//
// Sequence b attends over seqlen_k(b) = cache_seqlens[b] + seqlen_new keys. Masks, GQA/MQA, softcap and
// the scale follow attention.h: causal and window masks are aligned bottom-right (the last query token
// sits at the last key), and a query row that sees no key gets out = 0 and lse = -inf.
//
// Errors leave every tensor unchanged, the caches included: all checks run before anything is written.
// Checking cache_seqlens and block_table in device memory means copying them to the host and waiting for
// the stream; KVCacheArgs::check_indices = false skips that (see there).
#pragma once

#include <cstdint>

#include "flashattn/attention.h"

namespace flashattn {

// The most KV splits one sequence is cut into (num_splits above it is an error).
constexpr int kMaxKVSplits = 128;

struct KVCacheArgs {
  TensorView q;
  TensorView k_cache, v_cache;
  TensorView cache_seqlens;
  TensorView block_table;  // absent: contiguous cache
  TensorView k_new, v_new;  // both or neither
  TensorView out;
  TensorView lse;  // optional output

  float softmax_scale = 0.0f;  // 0 means 1 / sqrt(head_dim)
  bool causal = false;
  int64_t window_left = -1;  // -1 = unbounded
  int64_t window_right = -1;
  float softcap = 0.0f;  // 0 = off

  // KV splits per sequence: 0 lets the backend choose; 1..kMaxKVSplits forces that many (never more than
  // the sequence has keys). The chosen count changes only the rounding, never the math.
  int num_splits = 0;

  // true: cache_seqlens and block_table are checked before anything runs (a length below 0 or past the
  // capacity, or a page index outside the cache, is an error and nothing is written). With the index
  // tensors in CUDA memory that costs a device-to-host copy and a wait for the stream on every call.
  // false: CUDA index tensors are trusted and never read by the host, so the call does not synchronize (and
  // can be queued ahead or recorded into a CUDA graph). The kernels clamp what they read into range (a
  // length into [0, capacity - seqlen_new], a page index into [0, num_pages)), so bad indices give wrong
  // results but no access outside the caches. Index tensors in host memory are always checked.
  bool check_indices = true;

  Backend backend = Backend::kAuto;
  Algorithm algorithm = Algorithm::kAuto;
  int num_threads = 0;     // cpu: worker threads, 0 = all hardware threads
  void* stream = nullptr;  // cuda: the cudaStream_t to run on (nullptr = default stream)
};

// Appends k_new/v_new (when present) to the caches, then computes out (and lse) for q.
Status forward_kvcache(const KVCacheArgs& args, RunInfo* info = nullptr);

}  // namespace flashattn
