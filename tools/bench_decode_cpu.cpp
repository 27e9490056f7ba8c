// `flashattn bench --backend cpu --decode`: the CPU backend's KV-cache (decode) rate, beside the rate at
// which the same number of threads read memory, measured in the same run.
//
// Shapes: kDecodeShapes (bench.h), each with a contiguous and a paged cache (`--quick`: the first shape
// only). Bytes: K and V read once, 2 * batch * seqlen_k * heads_kv * head_dim * 2. Each timed run is one
// forward_kvcache call, its index validation included (on host tensors it is a pass over the lengths and the
// block table). K and V are host buffers of kDecodeCacheTokens tokens each (512 MiB in bf16; a quarter of
// that with --quick); smaller shapes rotate over disjoint caches so that consecutive calls do not find their
// keys in the last-level cache. The ceiling: every thread sums its share of the K buffer with the widest
// vector loads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <new>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

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

constexpr int64_t kQuickCacheTokens = 2 * 32768;  // --quick: two copies of the first shape
constexpr int kDefaultRepeat = 5;
constexpr int kDefaultWarmup = 1;
constexpr int kMinReadPasses = 3;  // the read ceiling is the best of at least this many passes
constexpr double kMsPerSecond = 1e3;
constexpr double kBytesPerGiga = 1e9;

struct CpuDecodeRow {
  int64_t batch = 0, seqlen_k = 0;
  bool paged = false;
  int copies = 0;
  double bytes = 0, ms = 0, gbps = 0;
  std::string kernel, error;
};

// Host caches and the tensors around them; every shape views them.
struct HostDecodeBuffers {
  int64_t cache_tokens = 0;
  std::vector<uint16_t> k, v, q, out;
  std::vector<int32_t> seqlens, tables;

  explicit HostDecodeBuffers(int64_t tokens)
      : cache_tokens(tokens),
        k(size_t(tokens * kDecodeRowElems)),
        v(size_t(tokens * kDecodeRowElems)),
        q(size_t(kDecodeMaxBatch * kDecodeSeqlenQ * kDecodeHeadsQ * kDecodeHeadDim)),
        out(q.size()),
        seqlens(size_t(kDecodeMaxBatch)),
        tables(size_t(tokens / kDecodePageSize)) {}

  // bf16 values spread over [-1, 1): the inputs' values do not change the rate, so a cheap generator
  // (splitmix64, four values a draw) fills the 2 x 512 MiB in about a second.
  void fill() {
    uint64_t state = kDecodeSeed;
    auto draw = [&state] {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    for (std::vector<uint16_t>* t : {&q, &k, &v})
      for (size_t i = 0; i < t->size(); i += 4) {
        const uint64_t bits = draw();
        for (size_t j = 0; j < 4 && i + j < t->size(); ++j) {
          const float x = float((bits >> (16 * j)) & 0xFFFF) / 32768.0f - 1.0f;
          (*t)[i + j] = core::float_to_bf16_bits(x);
        }
      }
  }

  // The lengths and, for a paged layout, one block table per copy (deal_decode_pages).
  void write_indices(const DecodeShape& shape, int copies, bool paged) {
    std::fill(seqlens.begin(), seqlens.begin() + shape.batch, int32_t(shape.seqlen_k));
    if (paged) deal_decode_pages(shape, copies, tables.data());
  }

  // The call on copy `c` of `shape`'s caches.
  KVCacheArgs args(const DecodeShape& shape, bool paged, int c, int splits, int threads) {
    DecodeTensors t;
    t.k = k.data();
    t.v = v.data();
    t.q = q.data();
    t.out = out.data();
    t.seqlens = seqlens.data();
    t.tables = tables.data();
    t.cache_tokens = cache_tokens;
    KVCacheArgs a = decode_call_args(t, shape, paged, c);
    a.backend = Backend::kCPU;
    a.num_splits = splits;
    a.num_threads = threads;
    return a;
  }
};

// The sum of words [first, last): a plain loop the compiler vectorizes, in a copy for each vector width
// where the platform can pick one at load time (the widest loads read memory fastest).
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
uint64_t sum_words(const uint64_t* words, size_t first, size_t last) {
  uint64_t sum = 0;
  for (size_t i = first; i < last; ++i) sum += words[i];
  return sum;
}

// GB/s at which `threads` threads read `data` (each its own contiguous share), best of `passes`.
double read_rate(const std::vector<uint16_t>& data, int threads, int passes) {
  const size_t words = data.size() * sizeof(uint16_t) / sizeof(uint64_t);
  const uint64_t* base = reinterpret_cast<const uint64_t*>(data.data());
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  double best_s = 0;
  for (int r = 0; r < std::max(1, passes); ++r) {
    const auto begin = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t first = words * size_t(t) / size_t(threads), last = words * size_t(t + 1) / size_t(threads);
        sums[size_t(t)] = sum_words(base, first, last);  // kept, so the loads are not optimized away
      });
    for (std::thread& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (r == 0 || s < best_s) best_s = s;
  }
  volatile uint64_t sink = std::accumulate(sums.begin(), sums.end(), uint64_t(0));
  (void)sink;
  return double(words * sizeof(uint64_t)) / best_s / kBytesPerGiga;
}

Status measure(HostDecodeBuffers& buf, const DecodeShape& shape, bool paged, const BenchOptions& o, int warmup,
               int repeat, CpuDecodeRow* r) {
  const int64_t tokens = shape.batch * shape.seqlen_k;
  r->batch = shape.batch;
  r->seqlen_k = shape.seqlen_k;
  r->paged = paged;
  r->copies = decode_copies(shape, buf.cache_tokens);
  r->bytes = 2.0 * double(tokens * kDecodeRowElems * kDecodeElemBytes);
  buf.write_indices(shape, r->copies, paged);
  int next = 0;
  RunInfo info;
  std::vector<double> times;
  const Status s = time_calls(/*on_gpu=*/false, warmup, repeat, [&] {
    const Status c = forward_kvcache(buf.args(shape, paged, next, o.splits, o.threads), &info);
    next = (next + 1) % r->copies;
    return c;
  }, &times);
  if (!s.ok()) return s;
  r->ms = median(times);
  r->gbps = r->bytes / (r->ms / kMsPerSecond) / kBytesPerGiga;
  r->kernel = info.kernel;
  return Status::Ok();
}

}  // namespace

int bench_decode_cpu(const BenchOptions& o) {
  const int threads = o.threads > 0 ? o.threads : hardware_threads();
  const int repeat = o.repeat > 0 ? o.repeat : kDefaultRepeat;
  const int warmup = o.warmup >= 0 ? o.warmup : kDefaultWarmup;
  const int64_t cache_tokens = o.quick ? kQuickCacheTokens : kDecodeCacheTokens;
  Progress progress("bench");

  const long long cache_mib = (long long)(cache_tokens * kDecodeRowElems * kDecodeElemBytes >> 20);
  progress.phase("allocating and filling 2 x " + std::to_string(cache_mib) +
                 " MiB of bf16 caches, measuring the read rate");
  std::unique_ptr<HostDecodeBuffers> owned;
  try {
    owned = std::make_unique<HostDecodeBuffers>(cache_tokens);
  } catch (const std::bad_alloc&) {
    progress.done();
    std::fprintf(stderr, "flashattn bench: out of host memory for the 2 x %lld MiB caches%s\n", cache_mib,
                 o.quick ? "" : " (--quick needs a quarter)");
    return kExitFailure;
  }
  HostDecodeBuffers& buf = *owned;
  buf.fill();
  const double read_gbps = read_rate(buf.k, threads, std::max(kMinReadPasses, repeat));
  progress.done();

  const std::string model = cpu_model();
  std::printf("cpu: %s, %d threads; bf16, %lld q heads / %lld kv heads, head_dim %lld, seqlen_q %lld; median of %d "
              "runs after %d warm-up\n",
              model.c_str(), threads, (long long)kDecodeHeadsQ, (long long)kDecodeHeadsKV, (long long)kDecodeHeadDim,
              (long long)kDecodeSeqlenQ, repeat, warmup);
  if (o.splits > 0) std::printf("KV splits forced: %d per sequence\n", o.splits);
  std::printf("read ceiling: %.1f GB/s (%d threads summing %.0f MiB)\n", read_gbps, threads,
              double(buf.k.size() * sizeof(uint16_t)) / (1024.0 * 1024.0));
  std::printf("%3s %7s %-10s %8s %9s %7s %8s  %s\n", "b", "seqlen", "layout", "MB", "ms", "GB/s", "of read",
              "kernel");
  std::fflush(stdout);

  std::vector<CpuDecodeRow> rows;
  int errors = 0;
  for (const DecodeShape& shape : kDecodeShapes) {
    if (shape.batch * shape.seqlen_k > cache_tokens) continue;  // --quick keeps the shapes that fit
    for (bool paged : {false, true}) {
      CpuDecodeRow r;
      const std::string layout = paged ? "paged" + std::to_string(kDecodePageSize) : "contiguous";
      progress.phase("decode b " + std::to_string(shape.batch) + " seqlen_k " + std::to_string(shape.seqlen_k) + " " +
                     layout);
      const Status s = measure(buf, shape, paged, o, warmup, repeat, &r);
      progress.done();
      if (!s.ok()) {
        ++errors;
        r.error = s.to_string();
        std::printf("%3lld %7lld %-10s  error: %s\n", (long long)shape.batch, (long long)shape.seqlen_k,
                    layout.c_str(), r.error.c_str());
      } else {
        std::printf("%3lld %7lld %-10s %8.1f %9.2f %7.2f %7.0f%%  %s\n", (long long)r.batch, (long long)r.seqlen_k,
                    layout.c_str(), r.bytes / 1e6, r.ms, r.gbps, read_gbps > 0 ? 100.0 * r.gbps / read_gbps : 0.0,
                    r.kernel.c_str());
      }
      std::fflush(stdout);
      rows.push_back(r);
    }
  }

  if (!o.json_path.empty()) {
    JsonWriter j;
    begin_cpu_result(j, "cpu_decode", model, threads);
    j.field("dtype", to_string(kDecodeDtype));
    j.field("heads_q", kDecodeHeadsQ).field("heads_kv", kDecodeHeadsKV).field("head_dim", kDecodeHeadDim);
    j.field("seqlen_q", kDecodeSeqlenQ).field("page_size", kDecodePageSize).field("repeat", repeat);
    j.field("warmup", warmup).field("splits", o.splits > 0 ? std::to_string(o.splits) : "heuristic");
    j.field("bytes", "K and V read once: 2 * b * seqlen_k * heads_kv * head_dim * 2");
    j.field("timing", "one forward_kvcache call per timed run, index validation included; median");
    j.key("ceil").begin_object().field("read_GBps", read_gbps);
    j.field("read_bytes", int64_t(buf.k.size() * sizeof(uint16_t))).end_object();
    j.key("rows").begin_array();
    for (const CpuDecodeRow& r : rows) {
      begin_decode_row(j, r.batch, r.seqlen_k, r.paged, r.copies, r.bytes);
      if (r.error.empty()) {
        j.field("ms", r.ms).field("GBps", r.gbps).field("fraction_of_read", read_gbps > 0 ? r.gbps / read_gbps : 0.0);
        j.field("kernel", r.kernel);
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
