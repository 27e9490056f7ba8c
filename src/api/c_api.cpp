// The C ABI (flashattn_c.h): converts the C structs and forwards to the C++ API.
#include <cstring>
#include <string>

#include "flashattn/attention.h"
#include "flashattn/flashattn_c.h"
#include "flashattn/kvcache.h"

namespace {

thread_local std::string g_last_error;

flashattn::TensorView to_view(const flashattn_tensor& t) {
  flashattn::TensorView v;
  v.data = t.data;
  v.dtype = static_cast<flashattn::DType>(t.dtype);
  v.device = static_cast<flashattn::Device>(t.device);
  v.device_index = t.device_index;
  v.ndim = t.ndim;
  for (int i = 0; i < flashattn::TensorView::kMaxDims; ++i) {
    v.shape[i] = t.shape[i];
    v.stride[i] = t.stride[i];
  }
  return v;
}

flashattn::AttentionArgs to_args(const flashattn_attention_args& c) {
  flashattn::AttentionArgs a;
  a.q = to_view(c.q);
  a.k = to_view(c.k);
  a.v = to_view(c.v);
  a.out = to_view(c.out);
  a.lse = to_view(c.lse);
  a.cu_seqlens_q = to_view(c.cu_seqlens_q);
  a.cu_seqlens_k = to_view(c.cu_seqlens_k);
  a.max_seqlen_q = c.max_seqlen_q;
  a.max_seqlen_k = c.max_seqlen_k;
  a.softmax_scale = c.softmax_scale;
  a.causal = c.causal != 0;
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.softcap = c.softcap;
  a.backend = static_cast<flashattn::Backend>(c.backend);
  a.algorithm = static_cast<flashattn::Algorithm>(c.algorithm);
  a.deterministic = c.deterministic != 0;
  a.num_threads = c.num_threads;
  a.stream = c.stream;
  return a;
}

flashattn::KVCacheArgs to_kvcache_args(const flashattn_kvcache_args& c) {
  flashattn::KVCacheArgs a;
  a.q = to_view(c.q);
  a.k_cache = to_view(c.k_cache);
  a.v_cache = to_view(c.v_cache);
  a.cache_seqlens = to_view(c.cache_seqlens);
  a.block_table = to_view(c.block_table);
  a.k_new = to_view(c.k_new);
  a.v_new = to_view(c.v_new);
  a.out = to_view(c.out);
  a.lse = to_view(c.lse);
  a.softmax_scale = c.softmax_scale;
  a.causal = c.causal != 0;
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.softcap = c.softcap;
  a.num_splits = c.num_splits;
  a.check_indices = c.check_indices != 0;
  a.backend = static_cast<flashattn::Backend>(c.backend);
  a.algorithm = static_cast<flashattn::Algorithm>(c.algorithm);
  a.num_threads = c.num_threads;
  a.stream = c.stream;
  return a;
}

int finish(const flashattn::Status& s) {
  g_last_error = s.ok() ? std::string() : s.to_string();
  return static_cast<int>(s.code());
}

}  // namespace

extern "C" {

void flashattn_attention_args_init(flashattn_attention_args* args) {
  if (!args) return;
  std::memset(args, 0, sizeof(*args));
  args->window_left = -1;
  args->window_right = -1;
}

void flashattn_backward_args_init(flashattn_backward_args* args) {
  if (!args) return;
  std::memset(args, 0, sizeof(*args));
  flashattn_attention_args_init(&args->fwd);
}

void flashattn_kvcache_args_init(flashattn_kvcache_args* args) {
  if (!args) return;
  std::memset(args, 0, sizeof(*args));
  args->window_left = -1;
  args->window_right = -1;
  args->check_indices = 1;
}

flashattn_tensor flashattn_tensor_contiguous(void* data, int32_t dtype, int32_t device, int32_t ndim,
                                             const int64_t* shape) {
  flashattn_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim < 0 ? 0 : (ndim > 4 ? 4 : ndim);
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape ? shape[i] : 0;
    t.stride[i] = stride;
    stride *= t.shape[i];
  }
  return t;
}

int flashattn_forward(const flashattn_attention_args* args) {
  if (!args) return finish(flashattn::Status::Invalid("args: null pointer"));
  return finish(flashattn::forward(to_args(*args)));
}

int flashattn_backward(const flashattn_backward_args* args) {
  if (!args) return finish(flashattn::Status::Invalid("args: null pointer"));
  flashattn::BackwardArgs b;
  b.fwd = to_args(args->fwd);
  b.dout = to_view(args->dout);
  b.dq = to_view(args->dq);
  b.dk = to_view(args->dk);
  b.dv = to_view(args->dv);
  return finish(flashattn::backward(b));
}

int flashattn_forward_kvcache(const flashattn_kvcache_args* args) {
  if (!args) return finish(flashattn::Status::Invalid("args: null pointer"));
  return finish(flashattn::forward_kvcache(to_kvcache_args(*args)));
}

const char* flashattn_last_error(void) { return g_last_error.c_str(); }
const char* flashattn_version(void) { return flashattn::version(); }

}  // extern "C"
