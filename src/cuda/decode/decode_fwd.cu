// Host side of the CUDA KV-cache (decode) path: which calls the split-KV kernels accept, the split count,
// where the splits merge (workspace and tickets, or a thread block cluster on sm90), and the launches
// (append, then attention with the in-kernel merge), all on the caller's stream.
//
// Kernel set: fp16 and bf16 x head dims {64, 128, 256}, and at head dim 128 a wide kernel (8 warps, one CTA
// per SM) for calls with few tiles (decode::use_wide_kernel). A head dim that is a multiple of 8 below 256 runs on
// the next larger kernel: its loads zero-fill the extra columns (dot products and P V are unchanged by
// zeros) and its stores skip them. Other head dims and fp32 are refused.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "core/numeric.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/stream_buffer.h"
#include "cuda/common/stream_counters.h"
#include "cuda/decode/decode_append.cuh"
#include "cuda/decode/decode_heuristic.h"
#include "cuda/decode/decode_kernels.h"
#include "cuda/launch.h"
#include "flashattn/kvcache.h"

namespace flashattn::cuda {
namespace {

using decode::DecodeKernel;
using decode::DecodeParams;

static_assert(decode::kMaxSplits == kMaxKVSplits, "the kernel's split limit must equal the API's");

constexpr int kMinComputeCapability = 8;      // cp.async, bf16 mma.sync
constexpr int kMinPdlComputeCapability = 9;   // griddepcontrol (programmatic dependent launch)
constexpr int kMinClusterComputeCapability = 9;  // thread block clusters, distributed shared memory
constexpr int64_t kGridYZLimit = 65535;       // gridDim.y (KV heads x row tiles) and gridDim.z (batch)
constexpr int64_t kCpAsyncAlignBytes = 16;
constexpr int kAppendThreads = 256;
constexpr int64_t kAppendMaxBlocks = 4096;    // grid-stride beyond this

int64_t row_tiles(const detail::KVCacheProblem& p) {
  return (p.group() * p.seqlen_q + decode::kRowsPerTile - 1) / decode::kRowsPerTile;
}
// Tiles of the call: (batch, KV head, row tile) triples, each split into CTAs along the keys.
int64_t tile_count(const detail::KVCacheProblem& p) { return p.batch * p.heads_kv * row_tiles(p); }

// The kernel for the call's head dim; at head dim 128 the wide one while the call's tiles fit one wave of it
// and the device has its shared memory (209 KB: not on sm80/sm86/sm89, which take the 4-warp kernel).
DecodeKernel kernel_for(const detail::KVCacheProblem& p, const Context& ctx) {
  if (p.head_dim <= 64) return decode::decode_kernel_hd64();
  if (p.head_dim <= 128) {
    const DecodeKernel wide = decode::decode_kernel_hd128_wide();
    const bool fits = size_t(wide.smem_bytes) <= ctx.smem_optin;
    return fits && decode::use_wide_kernel(tile_count(p), ctx.sm_count, wide.planned_ctas_per_sm)
               ? wide
               : decode::decode_kernel_hd128();
  }
  if (p.head_dim <= 256) return decode::decode_kernel_hd256();
  return DecodeKernel{};
}

const char* dtype_tag(DType dtype) { return dtype == DType::kFloat16 ? "fp16" : "bf16"; }

// The caches are read with 16-byte cp.async: the base and every stride that moves between rows that are
// read must keep 16-byte alignment (a stride of an extent-1 dimension is never applied).
Status check_cache_alignment(const char* name, const detail::CacheStrided& c, int64_t outer, int64_t rows,
                             int64_t heads, DType dtype) {
  const int64_t elem = dtype_size(dtype);
  auto bad = [&](const char* what, int64_t stride) {
    return Status::NotSupported(std::string("backend cuda: ") + name + " " + what + " stride " +
                                std::to_string(stride) + " elements is not a multiple of 16 bytes (the decode " +
                                "kernels read cache rows with 16-byte cp.async)");
  };
  if (reinterpret_cast<uintptr_t>(c.ptr) % kCpAsyncAlignBytes != 0)
    return Status::NotSupported(std::string("backend cuda: ") + name +
                                " data pointer is not 16-byte aligned (the decode kernels read cache rows with "
                                "16-byte cp.async)");
  if (outer > 1 && (c.outer_stride * elem) % kCpAsyncAlignBytes != 0) return bad("dimension-0", c.outer_stride);
  if (rows > 1 && (c.row_stride * elem) % kCpAsyncAlignBytes != 0) return bad("row", c.row_stride);
  if (heads > 1 && (c.head_stride * elem) % kCpAsyncAlignBytes != 0) return bad("head", c.head_stride);
  return Status::Ok();
}

// The cache addressing that the attention and the append kernels both take: the caches, the cached lengths,
// the block table (nullptr: contiguous), the page size (1 when contiguous) and the ranges the kernels clamp
// the index values into.
template <typename Params>
void set_cache_fields(const detail::KVCacheProblem& p, Params* d) {
  d->k_cache = to_params(p.k_cache);
  d->v_cache = to_params(p.v_cache);
  d->cache_seqlens = p.device_cache_seqlens;
  d->block_table = p.paged ? p.device_block_table : nullptr;
  d->block_table_row_stride = p.device_block_table_row_stride;
  d->page_size = decltype(d->page_size)(p.paged ? p.page_size : 1);
  // decode_supports keeps capacity + seqlen_new within int; validation keeps seqlen_new <= capacity.
  d->limits.max_cached = int(std::max<int64_t>(0, p.capacity - p.seqlen_new));
  d->limits.max_page = p.paged ? int(std::min<int64_t>(p.num_pages, INT_MAX) - 1) : 0;
}

DecodeParams make_params(const detail::KVCacheProblem& p, int64_t splits) {
  DecodeParams d{};
  d.q = to_params(p.q);
  d.out = to_params(p.out);
  d.lse = to_params(p.lse);
  set_cache_fields(p, &d);
  d.batch = int(p.batch);
  d.heads_kv = int(p.heads_kv);
  d.group = int(p.group());
  d.seqlen_q = int(p.seqlen_q);
  d.seqlen_new = int(p.seqlen_new);
  d.head_dim = int(p.head_dim);
  d.rows = int(p.group() * p.seqlen_q);
  d.m_tiles = int(row_tiles(p));
  d.scale_log2 = p.scale * core::kLog2e;
  if (p.softcap > 0.0f) {
    d.softcap_inner = p.scale / p.softcap;
    d.softcap_outer = p.softcap * core::kLog2e;
  }
  d.causal = p.causal;
  // Windows wider than any sequence behave as unbounded; clamp them into int.
  d.window_left = int(p.window_left < 0 ? -1 : std::min<int64_t>(p.window_left, INT_MAX));
  d.window_right = int(p.window_right < 0 ? -1 : std::min<int64_t>(p.window_right, INT_MAX));
  d.num_splits = int(splits);
  d.min_split_keys = p.num_splits > 0 ? 0 : int(decode::kMinSplitKeysGpu);
  return d;
}

decode::AppendParams make_append_params(const detail::KVCacheProblem& p) {
  decode::AppendParams a{};
  a.k_new = to_params(p.k_new);
  a.v_new = to_params(p.v_new);
  set_cache_fields(p, &a);
  a.batch = p.batch;
  a.seqlen_new = p.seqlen_new;
  a.heads_kv = p.heads_kv;
  a.head_dim = p.head_dim;
  return a;
}

// How many clusters of `cluster` CTAs of the kernel's cluster form fit on the device at once (0 where the
// query fails), asked once per device, dtype and size (the answer never changes, so no call repeats the
// query).
int cluster_capacity(const DecodeKernel& k, DType dtype, int device, int cluster) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, int>, int> known;
  const auto key = std::make_tuple(reinterpret_cast<const void*>(k.launch_cluster), device, int(dtype), cluster);
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(key);
  if (it != known.end()) return it->second;
  int fit = 0;
  if (!k.cluster_fit(dtype, cluster, &fit).ok()) {
    fit = 0;
    (void)cudaGetLastError();  // a refused query must not fail the call: it takes the ticket merge
  }
  known.emplace(key, fit);
  return fit;
}

// What a supported call runs: the kernel, the split count, and where the splits merge.
struct CallPlan {
  DecodeKernel kernel;
  int64_t tiles = 0;
  int64_t splits = 1;
  bool cluster = false;  // sm90: each tile's splits are one thread block cluster and merge inside it
};

// Prepares the kernel (its shared memory; CTAs per SM for the split rule) and plans the call. The splits of
// a tile merge inside one thread block cluster where the kernel has that form and every tile's cluster fits
// on the device at once (one wave, as the split rule plans); otherwise through the workspace, in the last CTA
// of each tile to finish.
Status plan_call(const detail::KVCacheProblem& p, const Context& ctx, CallPlan* plan) {
  plan->kernel = kernel_for(p, ctx);
  const DecodeKernel& k = plan->kernel;
  int ctas_per_sm = 0;
  const Status s = k.prepare(p.dtype, &ctas_per_sm);
  if (!s.ok()) return s;
  plan->tiles = tile_count(p);
  plan->splits = p.num_splits > 0 ? p.num_splits
                                  : decode::heuristic_splits(plan->tiles, p.max_len_k(), ctx.sm_count, ctas_per_sm);
  const bool cluster_form = ctx.cc_major >= kMinClusterComputeCapability && k.launch_cluster != nullptr &&
                            p.seqlen_q > 0 && plan->splits > 1 && plan->splits <= decode::kMaxClusterSplits;
  const int capacity = cluster_form ? cluster_capacity(k, p.dtype, ctx.device, int(plan->splits)) : 0;
  plan->cluster = decode::cluster_merge_fits(plan->tiles, plan->splits, capacity);
  return Status::Ok();
}

// The name RunInfo gives the planned call: "_w8" the wide kernel, "_c<N>" its splits merged in clusters of N.
std::string kernel_name(const detail::KVCacheProblem& p, const CallPlan& plan) {
  const DecodeKernel& k = plan.kernel;
  return std::string("fa2_decode_splitkv_sm80_") + dtype_tag(p.dtype) + "_hd" + std::to_string(k.head_dim) +
         (k.warps == 4 ? "" : "_w" + std::to_string(k.warps)) +
         (plan.cluster ? "_c" + std::to_string(plan.splits) : "");
}

}  // namespace

Status decode_supports(const detail::KVCacheProblem& p, const Context& ctx, std::string* kernel) {
  if (p.algorithm != Algorithm::kAuto && p.algorithm != Algorithm::kFA2)
    return Status::NotSupported(std::string("algorithm ") + to_string(p.algorithm) +
                                ": the CUDA KV-cache path has only the fa2-style split-KV kernel (use auto or fa2)");
  if (ctx.cc_major < kMinComputeCapability)
    return Status::NotSupported("backend cuda: the decode kernels need compute capability >= 8.0 (cp.async, bf16 "
                                "mma.sync), device has " + std::to_string(ctx.cc_major) + "." +
                                std::to_string(ctx.cc_minor));
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    return Status::NotSupported(std::string("dtype ") + to_string(p.dtype) +
                                " is not supported by the CUDA KV-cache (decode) kernels (fp16, bf16); use backend "
                                "cpu for " + to_string(p.dtype));
  const DecodeKernel k = kernel_for(p, ctx);
  if (k.head_dim == 0 || p.head_dim % decode::kChunkElems != 0)
    return Status::NotSupported("backend cuda: head_dim " + std::to_string(p.head_dim) +
                                " is not supported by the decode kernels (64, 128, 256; other multiples of 8 up to "
                                "256 pad up to the next one)");
  if (p.batch > kGridYZLimit || p.heads_kv * row_tiles(p) > kGridYZLimit)
    return Status::NotSupported("backend cuda: batch (" + std::to_string(p.batch) + ") and heads_kv x ceil(group x " +
                                "seqlen_q / 16) (" + std::to_string(p.heads_kv * row_tiles(p)) +
                                ") must each be at most 65535 (grid limit of the decode kernels)");
  if (p.capacity + p.seqlen_new > INT_MAX || p.page_size > INT_MAX)
    return Status::NotSupported("backend cuda: caches of more than 2^31 - 1 tokens per sequence are not supported");
  const int64_t outer = p.paged ? p.num_pages : p.batch;
  const int64_t rows = p.paged ? p.page_size : p.capacity;
  Status s = check_cache_alignment("k_cache", p.k_cache, outer, rows, p.heads_kv, p.dtype);
  if (s.ok()) s = check_cache_alignment("v_cache", p.v_cache, outer, rows, p.heads_kv, p.dtype);
  if (!s.ok()) return s;
  if (size_t(k.smem_bytes) > ctx.smem_optin)
    return Status::NotSupported("backend cuda: the decode kernel for head_dim " + std::to_string(k.head_dim) +
                                " needs " + std::to_string(k.smem_bytes) + " bytes of shared memory per block, the "
                                "device allows " + std::to_string(ctx.smem_optin));
  if (kernel != nullptr) {
    CallPlan plan;
    s = plan_call(p, ctx, &plan);
    if (!s.ok()) return s;
    *kernel = kernel_name(p, plan);
  }
  return Status::Ok();
}

bool decode_takes_forward(const detail::Problem& p, const Context& ctx, detail::KVCacheProblem* kv,
                          std::string* kernel) {
  if (p.backward || p.varlen || p.algorithm != Algorithm::kAuto || p.seqlen_k == 0 ||
      !decode::forward_rows_take_split_kv(p.group() * p.seqlen_q, p.batch * p.heads_kv, ctx.sm_count))
    return false;
  auto cache = [](const detail::Strided& t) {
    return detail::CacheStrided{t.ptr, t.batch_stride, t.row_stride, t.head_stride};
  };
  detail::KVCacheProblem c;
  c.dtype = p.dtype;
  c.device = p.device;
  c.device_index = p.device_index;
  c.batch = p.batch;
  c.heads_q = p.heads_q;
  c.heads_kv = p.heads_kv;
  c.head_dim = p.head_dim;
  c.seqlen_q = p.seqlen_q;
  c.capacity = p.seqlen_k;
  // Every sequence holds seqlen_k keys: no lengths anywhere (the kernels read a null cache_seqlens as
  // full caches, and max_len_k() as capacity).
  c.indices_on_host = false;
  c.q = p.q;
  c.out = p.out;
  c.lse = p.lse;
  c.k_cache = cache(p.k);
  c.v_cache = cache(p.v);
  c.scale = p.scale;
  c.softcap = p.softcap;
  c.causal = p.causal;
  c.window_left = p.window_left;
  c.window_right = p.window_right;
  c.backend = p.backend;
  c.stream = p.stream;
  if (!decode_supports(c, ctx, kernel).ok()) return false;
  *kv = std::move(c);
  return true;
}

Status decode_forward(const detail::KVCacheProblem& p, const Context& ctx, std::string* kernel) {
  Status s = decode_supports(p, ctx, nullptr);
  if (!s.ok()) return s;
  CallPlan plan;
  s = plan_call(p, ctx, &plan);
  if (!s.ok()) return s;
  if (kernel != nullptr) *kernel = kernel_name(p, plan);
  if (p.batch == 0) return Status::Ok();
  const DecodeKernel& k = plan.kernel;
  const int64_t tiles = plan.tiles, splits = plan.splits;
  const bool cluster = plan.cluster;
  DecodeParams params = make_params(p, splits);

  // Workspace and tickets before the append: a failed allocation must leave the caches untouched.
  StreamBuffer workspace(ctx.stream), own_tickets(ctx.stream);
  if (splits > 1 && p.seqlen_q > 0 && !cluster) {
    const size_t partial_rows = size_t(tiles * splits * decode::kRowsPerTile);
    const size_t o_bytes = partial_rows * size_t(k.head_dim) * sizeof(float);
    const size_t lse_bytes = partial_rows * sizeof(float);
    s = workspace.allocate(o_bytes + lse_bytes);
    if (!s.ok()) return s;
    params.partial_o = workspace.floats();
    params.partial_lse = workspace.floats(partial_rows * size_t(k.head_dim));
    s = launch_counters(ctx.device, ctx.stream, tiles, &own_tickets, &params.tickets);
    if (!s.ok()) return s;
  }

  if (p.has_new() && p.seqlen_new > 0) {
    const decode::AppendParams a = make_append_params(p);
    const int64_t total = p.batch * p.seqlen_new * p.heads_kv * p.head_dim;
    const int64_t blocks = std::min<int64_t>((total + kAppendThreads - 1) / kAppendThreads, kAppendMaxBlocks);
    decode::append_new_tokens_kernel<<<unsigned(blocks), kAppendThreads, 0, ctx.stream>>>(a);
    FA_CUDA_RETURN_IF_LAUNCH_ERROR("append_new_tokens_kernel");
  }
  if (p.seqlen_q > 0) {
    const dim3 grid(unsigned(splits), unsigned(p.heads_kv * row_tiles(p)), unsigned(p.batch));
    // sm90+: programmatic dependent launch (the kernel waits for the append or whatever ran before it).
    const bool pdl = ctx.cc_major >= kMinPdlComputeCapability;
    params.prefetch_blocks = pdl ? decode::kDecodePrefetchBlocks : 0;
    s = cluster ? k.launch_cluster(p.dtype, params, grid, ctx.stream, pdl)
                : k.launch(p.dtype, params, grid, ctx.stream, pdl);
    if (!s.ok()) return s;
  }
  s = own_tickets.release();
  if (!s.ok()) return s;
  return workspace.release();
}

}  // namespace flashattn::cuda
