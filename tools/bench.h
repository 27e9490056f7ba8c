// The two benchmarks behind `flashattn bench`: the CPU backend beside the machine's SGEMM rate, and the
// GPU sweep of the FlashAttention papers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/attention.h"
#include "flashattn/kvcache.h"

namespace flashattn::cli {

// The sweep and the ablation warm each measurement up for at least this long (time_calls): the H200 at its
// 700 W limit runs attention at a lower clock after ~0.1 s of load than from idle, and bench/peers_sdpa.py
// warms up its peers the same way, so ours and theirs are compared at the clock each settles at. `--warmup-ms`
// sets it (bench/interleaved.py shows that after 200 ms the clock is still falling).
constexpr double kGpuSustainedWarmupMs = 200.0;

struct BenchOptions {
  bool gpu = false;
  bool quick = false;
  bool ablation = false;
  bool decode = false;  // the KV-cache (decode) kernels' bandwidth instead of the sweep
  std::vector<Algorithm> algorithms;  // GPU: empty = every available CUDA algorithm
  std::string json_path;              // empty: no JSON; "-": stdout
  int threads = 0;                    // CPU: worker threads (0 = all)
  int repeat = 0;                     // timed runs (0 = the benchmark's default)
  int warmup = -1;                    // untimed runs first (-1 = the benchmark's default)
  double warmup_ms = kGpuSustainedWarmupMs;  // GPU sweep and ablation: minimum warm-up time per row
  int splits = 0;                     // --decode: KV splits forced on every call (0 = the backend's choice)
  DType cpu_dtype = DType::kFloat32;  // CPU sweep: the inputs' dtype (--dtype)
  bool forward = true;                // GPU sweep: the forward rows (--dir fwd or both)
  bool backward = true;               // GPU sweep: the backward rows (--dir bwd or both)
};

// The decode benchmark's problems (`--decode`, GPU and CPU): GQA with 32 query heads over 8 KV heads,
// head_dim 128, bf16, one query token per sequence, full caches; each (batch, seqlen_k) with a contiguous
// cache and with a paged one (page size 16, the pages of every sequence in shuffled order).
struct DecodeShape {
  int64_t batch, seqlen_k;
};
inline constexpr DecodeShape kDecodeShapes[] = {{1, 32768}, {1, 131072}, {16, 8192}, {64, 4096}};
inline constexpr int64_t kDecodeHeadsQ = 32;
inline constexpr int64_t kDecodeHeadsKV = 8;
inline constexpr int64_t kDecodeHeadDim = 128;
inline constexpr int64_t kDecodeSeqlenQ = 1;
inline constexpr int64_t kDecodePageSize = 16;
inline constexpr DType kDecodeDtype = DType::kBFloat16;
inline constexpr int64_t kDecodeElemBytes = 2;
// Tokens of the K (and V) buffer: the largest shape's batch x seqlen_k (512 MiB in bf16).
inline constexpr int64_t kDecodeCacheTokens = 64 * 4096;
inline constexpr int64_t kDecodeMaxBatch = 64;
inline constexpr int64_t kDecodeRowElems = kDecodeHeadsKV * kDecodeHeadDim;  // one token of K or V
inline constexpr uint64_t kDecodeSeed = 1;

// The buffers a decode benchmark views under every shape: K and V of cache_tokens tokens each, q and out
// for kDecodeMaxBatch sequences, the lengths, and the block tables (cache_tokens / kDecodePageSize entries).
struct DecodeTensors {
  void* k = nullptr;
  void* v = nullptr;
  void* q = nullptr;
  void* out = nullptr;
  int32_t* seqlens = nullptr;
  int32_t* tables = nullptr;
  int64_t cache_tokens = kDecodeCacheTokens;
  Device device = Device::kCPU;
};

// Disjoint caches of `shape` in the buffers: the timed calls rotate over them so that consecutive calls do
// not find their keys in a cache of the processor.
inline int decode_copies(const DecodeShape& shape, int64_t cache_tokens) {
  const int64_t copies = cache_tokens / (shape.batch * shape.seqlen_k);
  return int(copies > 1 ? copies : 1);
}

// The block tables of `copies` paged caches of `shape` (host memory, `copies * pages` entries): copy c owns
// pages [c * pages, (c + 1) * pages) of the buffer, dealt to its sequences in a shuffled order.
void deal_decode_pages(const DecodeShape& shape, int copies, int32_t* tables);

// The forward_kvcache call on copy `copy` of `shape`'s caches (paged: every copy's pages are numbered from
// the buffer's start, its table rows after copy - 1's). Backend and options are the caller's to set.
KVCacheArgs decode_call_args(const DecodeTensors& t, const DecodeShape& shape, bool paged, int copy);

class JsonWriter;
// Opens one decode row's JSON object with the fields the GPU and CPU decode benchmarks share: b, seqlen_k,
// layout, page_size, rotated_caches, bytes.
void begin_decode_row(JsonWriter& j, int64_t batch, int64_t seqlen_k, bool paged, int copies, double bytes);

int bench_cpu(const BenchOptions& options);
int bench_gpu(const BenchOptions& options);
// `--gpu --decode` (bench_decode.cpp): TB/s of K and V read once, beside the device copy rate.
int bench_decode(const BenchOptions& options);
// `--backend cpu --decode` (bench_decode_cpu.cpp): GB/s of K and V read once, beside the host read rate.
int bench_decode_cpu(const BenchOptions& options);

}  // namespace flashattn::cli
