// `flashattn bench --gpu --decode`: the KV-cache (decode) kernels' bandwidth on one GPU, beside the device
// copy rate measured in the same run.
//
// Shapes: kDecodeShapes (bench.h): GQA with 32 query heads over 8 KV heads, head_dim 128, bf16, one query
// token per sequence, full caches (no appended tokens), each with a contiguous cache and with a paged one
// (page size 16, the pages of every sequence in shuffled order). Bytes: K and V read once,
// 2 * batch * seqlen_k * heads_kv * head_dim * 2.
//
// Timing. A forward_kvcache call validates its index tensors on the host (a device-to-host copy and a stream
// synchronization) before it launches, so back-to-back calls leave the GPU idle between kernels. The
// kernel rate ("kernel" columns) is therefore measured through the backend entry point on a problem
// validated once: kCallsPerTiming calls are queued between two CUDA events (the host runs ahead, so the
// GPU never waits for it) and the time divided by the count. The "api" columns time single
// forward_kvcache calls, validation included. The "trusted" columns time forward_kvcache with
// check_indices off (no host copy, no synchronization), kCallsPerTiming calls queued between the events like
// the kernel rate. K and V are 512 MiB buffers each, viewed as one cache per
// shape; smaller shapes rotate over several disjoint caches so that consecutive calls never find their
// keys in L2 (50 MB on an H100/H200).
#include <algorithm>
#include <initializer_list>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#ifdef FLASHATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "api/backend.h"
#include "api/kvcache_problem.h"
#include "bench.h"
#include "bench_gpu_common.h"
#include "cli_args.h"
#include "cli_common.h"
#include "core/numeric.h"
#include "device_buffers.h"
#include "flashattn/kvcache.h"
#include "json_writer.h"

namespace flashattn::cli {
namespace {

constexpr int64_t kHeadsQ = kDecodeHeadsQ;
constexpr int64_t kHeadsKV = kDecodeHeadsKV;
constexpr int64_t kHeadDim = kDecodeHeadDim;
constexpr int64_t kSeqlenQ = kDecodeSeqlenQ;
constexpr int64_t kPageSize = kDecodePageSize;
constexpr DType kDtype = kDecodeDtype;
constexpr int64_t kElemBytes = kDecodeElemBytes;
constexpr int64_t kCacheTokens = kDecodeCacheTokens;
constexpr int64_t kMaxBatch = kDecodeMaxBatch;
constexpr int kCallsPerTiming = 20;
constexpr uint64_t kSeed = kDecodeSeed;
constexpr double kMsPerSecond = 1e3;
constexpr double kBytesPerTera = 1e12;
constexpr double kUsPerMs = 1e3;

int64_t row_elems() { return kDecodeRowElems; }

struct DecodeRow {
  int64_t batch = 0, seqlen_k = 0;
  bool paged = false;
  int copies = 0;  // disjoint caches the timed calls rotate over
  double bytes = 0;
  double ms = 0, tbps = 0;          // kernel rate: queued calls through the backend entry point
  double api_ms = 0, api_tbps = 0;  // forward_kvcache, validation included
  double trusted_ms = 0, trusted_tbps = 0;  // forward_kvcache with check_indices off, queued
  std::string kernel;
  std::string error;
};

// The device buffers every shape views: K, V, q, out, and the index tensors of every cache copy.
struct DecodeBuffers {
  DeviceAllocation k, v, q, out, seqlens, tables;

  Status allocate() {
    const size_t cache_bytes = size_t(kCacheTokens * row_elems() * kElemBytes);
    const size_t qo_bytes = size_t(kMaxBatch * kSeqlenQ * kHeadsQ * kHeadDim * kElemBytes);
    for (auto [a, bytes] : {std::pair{&k, cache_bytes}, {&v, cache_bytes}, {&q, qo_bytes}, {&out, qo_bytes},
                            {&seqlens, size_t(kMaxBatch) * sizeof(int32_t)},
                            {&tables, size_t(kCacheTokens / kPageSize) * sizeof(int32_t)}}) {
      Status s = a->allocate(bytes, 0);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  // Random bf16 in [-1, 1] for q, K and V (in chunks, to keep the host buffer small).
  Status fill() {
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    constexpr size_t kChunk = size_t(1) << 24;
    std::vector<uint16_t> host(kChunk);
    for (DeviceAllocation* a : {&q, &k, &v}) {
      const size_t elems = a->bytes() / sizeof(uint16_t);
      for (size_t off = 0; off < elems; off += kChunk) {
        const size_t n = std::min(kChunk, elems - off);
        for (size_t i = 0; i < n; ++i) host[i] = core::float_to_bf16_bits(dist(rng));
        Status s = copy_to_device(static_cast<uint16_t*>(a->data()) + off, host.data(), n * sizeof(uint16_t));
        if (!s.ok()) return s;
      }
    }
    return Status::Ok();
  }

  static Status copy_to_device(void* dst, const void* src, size_t bytes) {
#ifdef FLASHATTN_WITH_CUDA
    if (cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaGetLastError();
      return Status::Runtime("cudaMemcpy H2D failed");
    }
    return Status::Ok();
#else
    (void)dst, (void)src, (void)bytes;
    return Status::NotSupported("this build of the flashattn CLI has no CUDA runtime");
#endif
  }

  // Writes the lengths and, for a paged layout, one block table per copy (deal_decode_pages).
  Status write_indices(const DecodeShape& shape, int copies, bool paged) {
    std::vector<int32_t> lens(size_t(shape.batch), int32_t(shape.seqlen_k));
    Status s = copy_to_device(seqlens.data(), lens.data(), lens.size() * sizeof(int32_t));
    if (!s.ok() || !paged) return s;
    std::vector<int32_t> table(size_t(shape.batch * shape.seqlen_k / kPageSize * copies));
    deal_decode_pages(shape, copies, table.data());
    return copy_to_device(tables.data(), table.data(), table.size() * sizeof(int32_t));
  }

  // The call on copy `c` of `shape`'s caches.
  KVCacheArgs args(const DecodeShape& shape, bool paged, int c, int splits, bool check_indices = true) const {
    DecodeTensors t;
    t.k = k.data();
    t.v = v.data();
    t.q = q.data();
    t.out = out.data();
    t.seqlens = static_cast<int32_t*>(seqlens.data());
    t.tables = static_cast<int32_t*>(tables.data());
    t.device = Device::kCUDA;
    KVCacheArgs a = decode_call_args(t, shape, paged, c);
    a.backend = Backend::kCUDA;
    a.check_indices = check_indices;
    a.num_splits = splits;
    return a;
  }
};

// The device copy ceiling: one buffer copied into the other (bytes read + written over time).
Status copy_ceiling(const DecodeBuffers& b, int warmup, int repeat, double* tbps) {
#ifdef FLASHATTN_WITH_CUDA
  std::vector<double> times;
  Status s = time_calls(/*on_gpu=*/true, warmup, repeat, [&] {
    if (cudaMemcpyAsync(b.v.data(), b.k.data(), b.k.bytes(), cudaMemcpyDeviceToDevice, nullptr) != cudaSuccess) {
      cudaGetLastError();
      return Status::Runtime("cudaMemcpyAsync D2D failed");
    }
    return Status::Ok();
  }, &times);
  if (s.ok()) *tbps = 2.0 * double(b.k.bytes()) / (median(times) / kMsPerSecond) / kBytesPerTera;
  return s;
#else
  (void)b, (void)warmup, (void)repeat, (void)tbps;
  return Status::NotSupported("this build of the flashattn CLI has no CUDA runtime");
#endif
}

Status measure(DecodeBuffers& buf, const DecodeShape& shape, bool paged, int splits, int warmup, int repeat,
               DecodeRow* r) {
  const int64_t tokens = shape.batch * shape.seqlen_k;
  r->batch = shape.batch;
  r->seqlen_k = shape.seqlen_k;
  r->paged = paged;
  r->copies = decode_copies(shape, kCacheTokens);
  r->bytes = 2.0 * double(tokens * row_elems() * kElemBytes);
  Status s = buf.write_indices(shape, r->copies, paged);
  if (!s.ok()) return s;

  // Validated once per copy; then only the backend runs.
  std::vector<detail::KVCacheProblem> problems(size_t(r->copies));
  for (int c = 0; c < r->copies; ++c) {
    s = detail::make_kvcache_problem(buf.args(shape, paged, c, splits), &problems[size_t(c)]);
    if (!s.ok()) return s;
  }
  // Milliseconds per call of call(copy) with `calls` calls queued between the events, rotating over the copies.
  int next = 0;
  auto per_call_ms = [&](int calls, const std::function<Status(int)>& call, double* ms) {
    std::vector<double> times;
    const Status st = time_calls(/*on_gpu=*/true, warmup, repeat, [&] {
      for (int i = 0; i < calls; ++i) {
        const Status c = call(next);
        next = (next + 1) % r->copies;
        if (!c.ok()) return c;
      }
      return Status::Ok();
    }, &times);
    if (st.ok()) *ms = median(times) / calls;
    return st;
  };
  auto tbps = [&](double ms) { return r->bytes / (ms / kMsPerSecond) / kBytesPerTera; };

  RunInfo info;
  s = per_call_ms(kCallsPerTiming, [&](int c) { return detail::cuda_forward_kvcache(problems[size_t(c)], &info); },
                  &r->ms);
  if (!s.ok()) return s;
  r->tbps = tbps(r->ms);
  r->kernel = info.kernel;

  s = per_call_ms(1, [&](int c) { return forward_kvcache(buf.args(shape, paged, c, splits)); }, &r->api_ms);
  if (!s.ok()) return s;
  r->api_tbps = tbps(r->api_ms);

  s = per_call_ms(kCallsPerTiming,
                  [&](int c) { return forward_kvcache(buf.args(shape, paged, c, splits, /*check_indices=*/false)); },
                  &r->trusted_ms);
  if (!s.ok()) return s;
  r->trusted_tbps = tbps(r->trusted_ms);
  return Status::Ok();
}

}  // namespace

int bench_decode(const BenchOptions& o) {
  if (refuse_without_gpu("--decode")) return kExitFailure;
  const std::vector<GpuInfo> gpus = list_gpus();
  const int repeat = gpu_repeat(o);
  const int warmup = gpu_warmup(o);

  Progress progress("bench");
  DecodeBuffers buf;
  double copy_tbps = 0;
  progress.phase("allocating 2 x 512 MiB of bf16 caches, measuring the device copy rate");
  Status s = buf.allocate();
  // The ceiling first: the copy overwrites V with K, and the fill below makes them differ again.
  if (s.ok()) s = copy_ceiling(buf, warmup, repeat, &copy_tbps);
  progress.done();
  if (s.ok()) {
    progress.phase("filling the caches with random bf16");
    s = buf.fill();
    progress.done();
  }
  if (!s.ok()) {
    std::fprintf(stderr, "flashattn bench: %s\n", s.to_string().c_str());
    return kExitFailure;
  }

  std::printf("gpu: %s, driver %s; bf16, %lld q heads / %lld kv heads, head_dim %lld, seqlen_q %lld; median of %d "
              "runs after %d warm-up\n",
              gpus.front().name.c_str(), driver_version().c_str(), (long long)kHeadsQ, (long long)kHeadsKV,
              (long long)kHeadDim, (long long)kSeqlenQ, repeat, warmup);
  if (o.splits > 0) std::printf("KV splits forced: %d per sequence\n", o.splits);
  std::printf("device copy ceiling: %.2f TB/s (%.0f MiB read and written)\n", copy_tbps,
              double(buf.k.bytes()) / (1024.0 * 1024.0));
  std::printf("%3s %7s %-10s %8s %9s %7s %8s %9s %8s %10s  %s\n", "b", "seqlen", "layout", "MB", "us", "TB/s",
              "of copy", "api us", "api TB/s", "trust TB/s", "kernel");
  std::vector<DecodeRow> rows;
  int errors = 0;
  for (const DecodeShape& shape : kDecodeShapes) {
    for (bool paged : {false, true}) {
      DecodeRow r;
      progress.phase("decode b " + std::to_string(shape.batch) + " seqlen_k " + std::to_string(shape.seqlen_k) +
                     (paged ? " paged" : " contiguous"));
      s = measure(buf, shape, paged, o.splits, warmup, repeat, &r);
      progress.done();
      const std::string layout = paged ? "paged" + std::to_string(kPageSize) : "contiguous";
      if (!s.ok()) {
        ++errors;
        r.error = s.to_string();
        std::printf("%3lld %7lld %-10s  error: %s\n", (long long)shape.batch, (long long)shape.seqlen_k,
                    layout.c_str(), r.error.c_str());
      } else {
        std::printf("%3lld %7lld %-10s %8.1f %9.1f %7.2f %7.0f%% %9.1f %8.2f %10.2f  %s\n", (long long)r.batch,
                    (long long)r.seqlen_k, layout.c_str(), r.bytes / 1e6, r.ms * kUsPerMs, r.tbps,
                    copy_tbps > 0 ? 100.0 * r.tbps / copy_tbps : 0.0, r.api_ms * kUsPerMs, r.api_tbps,
                    r.trusted_tbps, r.kernel.c_str());
      }
      std::fflush(stdout);
      rows.push_back(r);
    }
  }

  if (!o.json_path.empty()) {
    JsonWriter j;
    begin_gpu_result(j, "gpu_decode", gpus.front());
    j.field("dtype", to_string(kDtype));
    j.field("heads_q", kHeadsQ).field("heads_kv", kHeadsKV).field("head_dim", kHeadDim).field("seqlen_q", kSeqlenQ);
    j.field("page_size", kPageSize).field("repeat", repeat).field("warmup", warmup);
    j.field("calls_per_timing", kCallsPerTiming).field("splits", o.splits > 0 ? std::to_string(o.splits) : "heuristic");
    j.field("bytes", "K and V read once: 2 * b * seqlen_k * heads_kv * head_dim * 2");
    j.field("timing", "kernel: calls queued back to back through the backend on a validated problem; api: single "
                      "forward_kvcache calls, index validation included; trusted: forward_kvcache calls with "
                      "check_indices off, queued back to back");
    j.key("ceil").begin_object().field("copy_TBps", copy_tbps).field("copy_bytes", int64_t(buf.k.bytes()));
    j.end_object();
    j.key("rows").begin_array();
    for (const DecodeRow& r : rows) {
      begin_decode_row(j, r.batch, r.seqlen_k, r.paged, r.copies, r.bytes);
      if (r.error.empty()) {
        j.field("ms", r.ms).field("TBps", r.tbps).field("fraction_of_copy", copy_tbps > 0 ? r.tbps / copy_tbps : 0.0);
        j.field("api_ms", r.api_ms).field("api_TBps", r.api_tbps);
        j.field("trusted_ms", r.trusted_ms).field("trusted_TBps", r.trusted_tbps).field("kernel", r.kernel);
      } else {
        j.field("error", r.error);
      }
      j.end_object();
    }
    j.end_array();
    if (!finish_result(j, o.json_path)) return kExitFailure;
  }
  return errors == 0 ? kExitOk : kExitFailure;
}

}  // namespace flashattn::cli
