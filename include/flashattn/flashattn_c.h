/* C ABI over the flashattn C++ API, for callers from other languages.
 * The structs mirror flashattn::TensorView / AttentionArgs / BackwardArgs field by field.
 * Every function returns a status code (0 = ok); the message of the last failed call on the calling
 * thread is returned by flashattn_last_error(). */
#ifndef FLASHATTN_C_H_
#define FLASHATTN_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum flashattn_dtype { FLASHATTN_F32 = 0, FLASHATTN_F16 = 1, FLASHATTN_BF16 = 2, FLASHATTN_F8E4M3 = 3, FLASHATTN_I32 = 4 };
enum flashattn_device { FLASHATTN_CPU = 0, FLASHATTN_CUDA = 1 };
enum flashattn_backend { FLASHATTN_BACKEND_AUTO = 0, FLASHATTN_BACKEND_CPU = 1, FLASHATTN_BACKEND_CUDA = 2 };
enum flashattn_algorithm {
  FLASHATTN_ALGO_AUTO = 0, FLASHATTN_ALGO_STANDARD = 1, FLASHATTN_ALGO_FA1 = 2, FLASHATTN_ALGO_FA2 = 3,
  FLASHATTN_ALGO_FA3 = 4
};
enum flashattn_status {
  FLASHATTN_OK = 0, FLASHATTN_INVALID_ARGUMENT = 1, FLASHATTN_NOT_SUPPORTED = 2, FLASHATTN_OUT_OF_MEMORY = 3,
  FLASHATTN_RUNTIME_ERROR = 4
};

typedef struct flashattn_tensor {
  void* data; /* NULL = absent */
  int32_t dtype;  /* enum flashattn_dtype */
  int32_t device; /* enum flashattn_device */
  int32_t device_index;
  int32_t ndim;
  int64_t shape[4];
  int64_t stride[4]; /* in elements */
} flashattn_tensor;

typedef struct flashattn_attention_args {
  flashattn_tensor q, k, v, out, lse;
  flashattn_tensor cu_seqlens_q, cu_seqlens_k; /* varlen; rows after the last sequence: out 0, lse -inf */
  int64_t max_seqlen_q, max_seqlen_k;
  float softmax_scale; /* 0 = 1/sqrt(head_dim) */
  int32_t causal;
  int64_t window_left, window_right; /* -1 = unbounded */
  float softcap;                     /* 0 = off */
  int32_t backend;                   /* enum flashattn_backend */
  int32_t algorithm;                 /* enum flashattn_algorithm */
  int32_t deterministic;
  int32_t num_threads;
  void* stream;
} flashattn_attention_args;

typedef struct flashattn_backward_args {
  flashattn_attention_args fwd;
  flashattn_tensor dout, dq, dk, dv;
} flashattn_backward_args;

/* Mirrors flashattn::KVCacheArgs (flashattn/kvcache.h): attention of new queries over a KV cache,
 * contiguous or paged (block_table present), appending k_new/v_new first when present. */
typedef struct flashattn_kvcache_args {
  flashattn_tensor q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, out, lse;
  float softmax_scale; /* 0 = 1/sqrt(head_dim) */
  int32_t causal;
  int64_t window_left, window_right; /* -1 = unbounded */
  float softcap;                     /* 0 = off */
  int32_t num_splits;                /* 0 = chosen by the backend */
  int32_t backend;                   /* enum flashattn_backend */
  int32_t algorithm;                 /* enum flashattn_algorithm */
  int32_t num_threads;
  void* stream;
  int32_t check_indices; /* 1 (the default) = check cache_seqlens / block_table; 0 = trust CUDA ones */
} flashattn_kvcache_args;

/* Fills args with the defaults (everything absent, window -1, auto backend, check_indices 1). */
void flashattn_attention_args_init(flashattn_attention_args* args);
void flashattn_backward_args_init(flashattn_backward_args* args);
void flashattn_kvcache_args_init(flashattn_kvcache_args* args);
/* A contiguous row-major view. */
flashattn_tensor flashattn_tensor_contiguous(void* data, int32_t dtype, int32_t device, int32_t ndim,
                                             const int64_t* shape);

int flashattn_forward(const flashattn_attention_args* args);
int flashattn_backward(const flashattn_backward_args* args);
int flashattn_forward_kvcache(const flashattn_kvcache_args* args);
const char* flashattn_last_error(void);
const char* flashattn_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_C_H_ */
