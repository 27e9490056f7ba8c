// The two benchmarks behind `flashattn bench`: the CPU backend beside the machine's SGEMM rate, and the
// GPU sweep of the FlashAttention papers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/attention.h"

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

int bench_cpu(const BenchOptions& options);
int bench_gpu(const BenchOptions& options);
// `--gpu --decode` (bench_decode.cpp): TB/s of K and V read once, beside the device copy rate.
int bench_decode(const BenchOptions& options);
// `--backend cpu --decode` (bench_decode_cpu.cpp): GB/s of K and V read once, beside the host read rate.
int bench_decode_cpu(const BenchOptions& options);

}  // namespace flashattn::cli
