// Backend-independent validation of KV-cache (decode) calls: shapes, strides, dtypes, devices, and the
// index tensors (cache lengths against the capacity, block-table entries against the page count).
// Everything is checked before any tensor is written, because the call appends to the caches in place.
#include <cstdint>
#include <sstream>
#include <string>

#include "api/backend.h"
#include "api/kvcache_problem.h"
#include "api/validate_rules.h"

namespace flashattn::detail {
namespace {

Strided strided4(const TensorView& t) {
  Strided s;
  s.ptr = t.data;
  s.batch_stride = t.stride[0];
  s.row_stride = t.stride[1];
  s.head_stride = t.stride[2];
  return s;
}

CacheStrided cache_strided(const TensorView& t) {
  CacheStrided c;
  c.ptr = t.data;
  c.outer_stride = t.stride[0];
  c.row_stride = t.stride[1];
  c.head_stride = t.stride[2];
  return c;
}

// Reads an int32 index tensor whose `count` entries lie at data[0, count) (host or device memory).
Status read_index(const TensorView& t, int64_t count, void* stream, std::vector<int32_t>* out) {
  if (count <= 0) {
    out->clear();
    return Status::Ok();
  }
  if (t.device == Device::kCPU) {
    const int32_t* p = static_cast<const int32_t*>(t.data);
    out->assign(p, p + count);
    return Status::Ok();
  }
  // The CUDA copy reads shape[0] entries of a 1-D view: describe the span as one.
  TensorView span = TensorView::contiguous(t.data, DType::kInt32, {count}, t.device, t.device_index);
  return cuda_copy_index_to_host(span, stream, out);
}

Status fill_tensors(const KVCacheArgs& a, KVCacheProblem* p) {
  FA_RETURN_IF_ERROR(check_tensor("q", a.q, 4));
  if (a.q.dtype == DType::kInt32) return invalid("q: dtype int32 is not a floating-point type");
  FA_RETURN_IF_ERROR(check_tensor("k_cache", a.k_cache, 4));
  FA_RETURN_IF_ERROR(check_tensor("v_cache", a.v_cache, 4));
  FA_RETURN_IF_ERROR(check_tensor("out", a.out, 4));
  FA_RETURN_IF_ERROR(check_same_dtype("k_cache", a.k_cache, a.q));
  FA_RETURN_IF_ERROR(check_same_dtype("v_cache", a.v_cache, a.q));
  FA_RETURN_IF_ERROR(check_same_dtype("out", a.out, a.q));
  FA_RETURN_IF_ERROR(check_same_place("k_cache", a.k_cache, a.q));
  FA_RETURN_IF_ERROR(check_same_place("v_cache", a.v_cache, a.q));
  FA_RETURN_IF_ERROR(check_same_place("out", a.out, a.q));

  p->dtype = a.q.dtype;
  p->device = a.q.device;
  p->device_index = a.q.device_index;
  p->batch = a.q.shape[0];
  p->seqlen_q = a.q.shape[1];
  p->heads_q = a.q.shape[2];
  p->head_dim = a.q.shape[3];
  p->heads_kv = a.k_cache.shape[2];
  if (p->head_dim == 0) return invalid("q: head_dim must be positive, got 0");
  if (p->heads_q == 0) return invalid("q: number of heads must be positive, got 0");
  FA_RETURN_IF_ERROR(check_shape("out", a.out, {p->batch, p->seqlen_q, p->heads_q, p->head_dim}, "the shape of q"));
  if (a.k_cache.shape[3] != p->head_dim)
    return invalid("k_cache: head_dim ", a.k_cache.shape[3], " must equal the head_dim of q (", p->head_dim, ")");
  if (p->heads_kv == 0) return invalid("k_cache: number of heads must be positive, got 0");
  if (p->heads_q % p->heads_kv != 0)
    return invalid("k_cache: heads_q (", p->heads_q, ") must be a multiple of heads_kv (", p->heads_kv, ") for GQA/MQA");
  FA_RETURN_IF_ERROR(check_shape("v_cache", a.v_cache,
                                    {a.k_cache.shape[0], a.k_cache.shape[1], p->heads_kv, p->head_dim},
                                    "the shape of k_cache"));

  p->paged = a.block_table.present();
  if (p->paged) {
    const TensorView& bt = a.block_table;
    FA_RETURN_IF_ERROR(check_tensor("block_table", bt, 2));
    if (bt.dtype != DType::kInt32) return invalid("block_table: dtype must be int32, got ", to_string(bt.dtype));
    FA_RETURN_IF_ERROR(check_same_place("block_table", bt, a.q));
    if (bt.shape[0] != p->batch)
      return invalid("block_table: has ", bt.shape[0], " rows but the batch of q is ", p->batch,
                     "; it must be [batch, max_pages_per_seq]");
    p->num_pages = a.k_cache.shape[0];
    p->page_size = a.k_cache.shape[1];
    p->max_pages_per_seq = bt.shape[1];
    if (p->page_size < 1)
      return invalid("k_cache: page_size (dimension 1 of a paged cache) must be >= 1, got ", p->page_size);
    p->capacity = p->max_pages_per_seq * p->page_size;
  } else {
    if (a.k_cache.shape[0] != p->batch)
      return invalid("k_cache: batch ", a.k_cache.shape[0], " must equal the batch of q (", p->batch,
                     ") for a contiguous cache (pass block_table for a paged one)");
    p->capacity = a.k_cache.shape[1];
  }

  if (a.k_new.present() != a.v_new.present())
    return invalid(a.k_new.present() ? "v_new: is absent but k_new is present; pass both or neither"
                                     : "k_new: is absent but v_new is present; pass both or neither");
  if (a.k_new.present()) {
    FA_RETURN_IF_ERROR(check_tensor("k_new", a.k_new, 4));
    FA_RETURN_IF_ERROR(check_tensor("v_new", a.v_new, 4));
    FA_RETURN_IF_ERROR(check_same_dtype("k_new", a.k_new, a.q));
    FA_RETURN_IF_ERROR(check_same_dtype("v_new", a.v_new, a.q));
    FA_RETURN_IF_ERROR(check_same_place("k_new", a.k_new, a.q));
    FA_RETURN_IF_ERROR(check_same_place("v_new", a.v_new, a.q));
    p->seqlen_new = a.k_new.shape[1];
    FA_RETURN_IF_ERROR(check_shape("k_new", a.k_new, {p->batch, p->seqlen_new, p->heads_kv, p->head_dim},
                                      "[batch, seqlen_new, heads_kv, head_dim]"));
    FA_RETURN_IF_ERROR(check_shape("v_new", a.v_new, {p->batch, p->seqlen_new, p->heads_kv, p->head_dim},
                                      "the shape of k_new"));
    p->k_new = strided4(a.k_new);
    p->v_new = strided4(a.v_new);
  }

  if (a.lse.present()) {
    const TensorView& l = a.lse;
    FA_RETURN_IF_ERROR(check_same_place("lse", l, a.q));
    if (l.dtype != DType::kFloat32) return invalid("lse: dtype must be float32, got ", to_string(l.dtype));
    FA_RETURN_IF_ERROR(check_shape("lse", l, {p->batch, p->heads_q, p->seqlen_q}, "[batch, heads_q, seqlen_q]"));
    if (!l.is_contiguous()) return invalid("lse: must be contiguous");
    if (reinterpret_cast<uintptr_t>(l.data) % alignof(float) != 0) return invalid("lse: data pointer must be 4-byte aligned");
    p->lse.ptr = l.data;
    p->lse.batch_stride = p->heads_q * p->seqlen_q;
    p->lse.head_stride = p->seqlen_q;
    p->lse.row_stride = 1;
  }

  p->q = strided4(a.q);
  p->out = strided4(a.out);
  p->k_cache = cache_strided(a.k_cache);
  p->v_cache = cache_strided(a.v_cache);
  return Status::Ok();
}

Status fill_indices(const KVCacheArgs& a, KVCacheProblem* p) {
  const TensorView& cs = a.cache_seqlens;
  if (!cs.present()) return invalid("cache_seqlens: is required but absent (data is null)");
  if (cs.ndim != 1) return invalid("cache_seqlens: expected 1 dimension [batch], got ", cs.ndim);
  if (cs.dtype != DType::kInt32) return invalid("cache_seqlens: dtype must be int32, got ", to_string(cs.dtype));
  if (cs.shape[0] != p->batch)
    return invalid("cache_seqlens: has ", cs.shape[0], " entries but the batch of q is ", p->batch);
  if (cs.shape[0] > 1 && cs.stride[0] != 1) return invalid("cache_seqlens: must be contiguous");
  if (reinterpret_cast<uintptr_t>(cs.data) % alignof(int32_t) != 0)
    return invalid("cache_seqlens: data pointer is not aligned to its element size (4 bytes)");
  FA_RETURN_IF_ERROR(check_same_place("cache_seqlens", cs, a.q));
  p->device_cache_seqlens = static_cast<const int32_t*>(cs.data);

  const TensorView& bt = a.block_table;
  const int64_t cols = p->max_pages_per_seq;
  const int64_t row_stride = p->batch > 1 && p->paged ? bt.stride[0] : cols;
  if (p->paged) {
    if (p->batch > 1 && row_stride < cols)
      return invalid("block_table: row stride ", row_stride, " is smaller than its ", cols, " columns (rows overlap)");
    p->device_block_table = static_cast<const int32_t*>(bt.data);
    p->device_block_table_row_stride = row_stride;
  }

  // Trusted CUDA indices (check_indices false) stay on the device: no copy, no wait for the stream.
  // The kernels then clamp lengths into [0, capacity - seqlen_new] and pages into [0, num_pages): both
  // ranges must exist.
  if (!a.check_indices && cs.device == Device::kCUDA) {
    if (p->seqlen_new > p->capacity)
      return invalid("k_new: ", p->seqlen_new, " new tokens exceed the cache capacity of ", p->capacity);
    if (p->paged && p->num_pages == 0 && p->capacity > 0)
      return invalid("k_cache: has no pages, so with check_indices off a length above 0 could not be clamped into "
                     "it; pass check_indices = true");
    p->indices_on_host = false;
    return Status::Ok();
  }

  FA_RETURN_IF_ERROR(read_index(cs, p->batch, a.stream, &p->cache_seqlens));
  for (int64_t b = 0; b < p->batch; ++b) {
    const int64_t len = p->cache_seqlens[size_t(b)];
    if (len < 0) return invalid("cache_seqlens[", b, "]: must be >= 0, got ", len);
    if (len + p->seqlen_new > p->capacity)
      return invalid("cache_seqlens[", b, "]: ", len, " cached + ", p->seqlen_new, " new tokens exceed the cache capacity of ",
                     p->capacity, p->paged ? " (max_pages_per_seq * page_size)" : " (max_seqlen, dimension 1 of k_cache)");
  }
  if (!p->paged) return Status::Ok();

  // The block table is read densely; a CUDA copy takes the whole strided span and compacts it here.
  std::vector<int32_t> span;
  const int64_t span_len = p->batch > 0 && cols > 0 ? (p->batch - 1) * row_stride + cols : 0;
  FA_RETURN_IF_ERROR(read_index(bt, span_len, a.stream, &span));
  p->block_table.assign(size_t(p->batch * cols), 0);
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t i = 0; i < cols; ++i) p->block_table[size_t(b * cols + i)] = span[size_t(b * row_stride + i)];
  // Only the pages a sequence uses (after the append) must be valid; unused slots may hold anything.
  for (int64_t b = 0; b < p->batch; ++b) {
    const int64_t pages_used = (p->len_k(b) + p->page_size - 1) / p->page_size;
    for (int64_t i = 0; i < pages_used; ++i) {
      const int64_t page = p->block_table[size_t(b * cols + i)];
      if (page < 0 || page >= p->num_pages)
        return invalid("block_table[", b, "][", i, "]: page index ", page, " is outside [0, ", p->num_pages,
                       ") (the pages of k_cache); sequence ", b, " uses ", pages_used, " page(s)");
    }
  }
  return Status::Ok();
}

Status fill_scalars(const KVCacheArgs& a, KVCacheProblem* p) {
  FA_RETURN_IF_ERROR(check_softmax_options(a, p->head_dim, &p->scale));
  p->softcap = a.softcap;
  p->causal = a.causal;
  p->window_left = a.window_left;
  p->window_right = a.window_right;
  if (a.num_splits < 0 || a.num_splits > kMaxKVSplits)
    return invalid("num_splits: must be in [0, ", kMaxKVSplits, "] (0 = chosen by the backend), got ", a.num_splits);
  p->num_splits = a.num_splits;
  FA_RETURN_IF_ERROR(check_execution_options(a));
  p->backend = a.backend;
  p->algorithm = a.algorithm;
  p->num_threads = a.num_threads;
  p->stream = a.stream;
  return Status::Ok();
}

}  // namespace

Status make_kvcache_problem(const KVCacheArgs& a, KVCacheProblem* p) {
  if (a.q.device == Device::kCUDA && !cuda_is_built())
    return Status::NotSupported("q: lives in CUDA memory but this build of flashattn has no CUDA backend");
  FA_RETURN_IF_ERROR(fill_tensors(a, p));
  FA_RETURN_IF_ERROR(fill_scalars(a, p));
  // Pointer kinds before the index reads: a host pointer declared as CUDA must not reach a device copy.
  FA_RETURN_IF_ERROR(check_locations({{"q", &a.q},
                                      {"k_cache", &a.k_cache},
                                      {"v_cache", &a.v_cache},
                                      {"cache_seqlens", &a.cache_seqlens},
                                      {"out", &a.out},
                                      {"lse", &a.lse},
                                      {"block_table", &a.block_table},
                                      {"k_new", &a.k_new},
                                      {"v_new", &a.v_new}}));
  return fill_indices(a, p);
}

}  // namespace flashattn::detail
