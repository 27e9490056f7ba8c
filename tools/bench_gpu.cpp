// `flashattn bench --gpu`: the sweep of the FlashAttention papers on one GPU.
//
// Every configuration holds 16384 tokens (batch = 16384 / seqlen) of hidden size 2048 (heads =
// 2048 / head_dim), so q, k, v, out and the gradients have the same number of elements in every row
// of the sweep: they are allocated once and viewed under each shape. Each tensor is 64 MiB in bf16,
// larger than the H100/H200 L2, so repeated runs do not time a warm cache.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "cli_args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/numeric.h"
#include "device_buffers.h"
#include "json_writer.h"

namespace flashattn::cli {
namespace {

constexpr int64_t kTokens = 16384;
constexpr int64_t kHidden = 2048;
constexpr int64_t kHeadDims[] = {64, 128, 256};
constexpr int64_t kSeqlens[] = {512, 1024, 2048, 4096, 8192, 16384};
constexpr int64_t kQuickHeadDims[] = {64, 128};
constexpr int64_t kQuickSeqlens[] = {1024, 4096, 16384};
constexpr int kGpuDefaultRepeat = 10;
constexpr int kGpuDefaultWarmup = 3;
constexpr double kBackwardFlopFactor = 2.5;
constexpr double kCausalFlopFactor = 0.5;  // the papers count half the pairs for causal
constexpr double kFlopsPerTera = 1e12;
constexpr double kMsPerSecond = 1e3;
constexpr uint64_t kGpuBenchSeed = 1;
constexpr DType kDtype = DType::kBFloat16;

struct GpuRow {
  Algorithm algo = Algorithm::kAuto;
  bool backward = false;
  int64_t d = 0, n = 0, b = 0, h = 0;
  bool causal = false;
  double ms = 0, tflops = 0;
  std::string kernel;
  std::string skipped;  // non-empty: why the row did not run
};

// The same 64 MiB buffers, viewed as [batch, seqlen, heads, head_dim] for every configuration.
struct SweepBuffers {
  DeviceAllocation q, k, v, out, dout, dq, dk, dv, lse;

  Status allocate(int device) {
    const size_t bytes = size_t(kTokens * kHidden * dtype_size(kDtype));
    // LSE is float32 [batch, heads, seqlen]: tokens * heads floats, largest at the smallest head_dim.
    const size_t lse_bytes = size_t(kTokens * (kHidden / kHeadDims[0])) * sizeof(float);
    for (DeviceAllocation* a : {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) {
      Status s = a->allocate(bytes, device);
      if (!s.ok()) return s;
    }
    return lse.allocate(lse_bytes, device);
  }

  // Random bf16 in [-1, 1] for the inputs; the outputs are written by the forward before any read.
  Status fill() {
    std::vector<uint16_t> host(size_t(kTokens * kHidden));
    std::mt19937_64 rng(kGpuBenchSeed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (DeviceAllocation* a : {&q, &k, &v, &dout}) {
      for (uint16_t& x : host) x = core::float_to_bf16_bits(dist(rng));
      Status s = a->copy_from_host(host.data(), host.size() * sizeof(uint16_t));
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  BackwardArgs args(int64_t b, int64_t n, int64_t h, int64_t d, bool causal, Algorithm algo) const {
    auto view = [&](const DeviceAllocation& a) {
      return TensorView::contiguous(a.data(), kDtype, {b, n, h, d}, Device::kCUDA, 0);
    };
    BackwardArgs ba;
    AttentionArgs& fa = ba.fwd;
    fa.q = view(q);
    fa.k = view(k);
    fa.v = view(v);
    fa.out = view(out);
    fa.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {b, h, n}, Device::kCUDA, 0);
    fa.causal = causal;
    fa.backend = Backend::kCUDA;
    fa.algorithm = algo;
    ba.dout = view(dout);
    ba.dq = view(dq);
    ba.dk = view(dk);
    ba.dv = view(dv);
    return ba;
  }
};

// Out of memory (the standard algorithm materializes S at long sequences) is a skip, as in the papers'
// tables; any other error is a failure.
bool is_skip(const Status& s) { return s.code() == StatusCode::kNotSupported || s.code() == StatusCode::kOutOfMemory; }

void print_row(const GpuRow& r) {
  if (!r.skipped.empty()) {
    std::printf("%-8s %-3s %4lld %6lld %3lld %3lld %-6s %10s %8s  skip (%s)\n", to_string(r.algo),
                r.backward ? "bwd" : "fwd", (long long)r.d, (long long)r.n, (long long)r.b, (long long)r.h,
                r.causal ? "yes" : "no", "-", "-", r.skipped.c_str());
  } else {
    std::printf("%-8s %-3s %4lld %6lld %3lld %3lld %-6s %10.3f %8.1f  %s\n", to_string(r.algo),
                r.backward ? "bwd" : "fwd", (long long)r.d, (long long)r.n, (long long)r.b, (long long)r.h,
                r.causal ? "yes" : "no", r.ms, r.tflops, r.kernel.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int bench_gpu(const BenchOptions& o) {
  if (o.ablation) {
    bool fa3 = false;
    for (Algorithm a : available_cuda_algorithms()) fa3 = fa3 || a == Algorithm::kFA3;
    std::fprintf(stderr, "flashattn bench: --ablation is not yet available%s\n",
                 fa3 ? "" : ": it needs the fa3 kernel, which this build does not offer");
    return kExitFailure;
  }
  if (!gpu_present()) {
    std::fprintf(stderr, "flashattn bench: --gpu: %s\n",
                 cuda_built() ? "no CUDA device is present" : "this build of flashattn has no CUDA kernels");
    return kExitFailure;
  }
  const std::vector<GpuInfo> gpus = list_gpus();
  std::vector<Algorithm> algos = o.algorithms.empty() ? available_cuda_algorithms() : o.algorithms;
  const int repeat = o.repeat > 0 ? o.repeat : kGpuDefaultRepeat;
  const int warmup = o.warmup >= 0 ? o.warmup : kGpuDefaultWarmup;
  std::vector<int64_t> head_dims(std::begin(kHeadDims), std::end(kHeadDims));
  std::vector<int64_t> seqlens(std::begin(kSeqlens), std::end(kSeqlens));
  if (o.quick) {
    head_dims.assign(std::begin(kQuickHeadDims), std::end(kQuickHeadDims));
    seqlens.assign(std::begin(kQuickSeqlens), std::end(kQuickSeqlens));
  }

  Progress progress("bench");
  SweepBuffers buf;
  progress.phase("allocating and filling 8 x 64 MiB of bf16 tensors");
  Status s = buf.allocate(0);
  if (s.ok()) s = buf.fill();
  progress.done();
  if (!s.ok()) {
    std::fprintf(stderr, "flashattn bench: %s\n", s.to_string().c_str());
    return kExitFailure;
  }

  std::printf("gpu: %s, driver %s; bf16, %lld tokens, hidden %lld; median of %d runs after %d warm-up\n",
              gpus.front().name.c_str(), driver_version().c_str(), (long long)kTokens, (long long)kHidden, repeat,
              warmup);
  std::printf("%-8s %-3s %4s %6s %3s %3s %-6s %10s %8s  %s\n", "algo", "dir", "d", "N", "b", "h", "causal", "ms",
              "TFLOP/s", "kernel");
  std::vector<GpuRow> rows;
  int errors = 0;
  for (Algorithm algo : algos) {
    for (int64_t d : head_dims) {
      for (int64_t n : seqlens) {
        for (bool causal : {false, true}) {
          for (bool bwd : {false, true}) {
            GpuRow r;
            r.algo = algo;
            r.backward = bwd;
            r.d = d;
            r.n = n;
            r.b = kTokens / n;
            r.h = kHidden / d;
            r.causal = causal;
            const BackwardArgs args = buf.args(r.b, n, r.h, d, causal, algo);
            RunInfo info;
            s = bwd ? check_supported(args, &info) : check_supported(args.fwd, &info);
            std::vector<double> times;
            progress.phase(std::string(to_string(algo)) + (bwd ? " bwd" : " fwd") + " d " + std::to_string(d) + " N " +
                           std::to_string(n) + (causal ? " causal" : ""));
            // The backward reads the forward's out and lse: run the forward once first.
            if (s.ok() && bwd) s = forward(args.fwd);
            if (s.ok()) {
              s = time_calls(/*on_gpu=*/true, warmup, repeat,
                             [&] { return bwd ? backward(args, &info) : forward(args.fwd, &info); }, &times);
            }
            progress.done();
            if (!s.ok()) {
              if (!is_skip(s)) {
                ++errors;
                std::fprintf(stderr, "flashattn bench: %s\n", s.to_string().c_str());
              }
              r.skipped = s.message();
            } else {
              const double fwd_flops = 4.0 * double(r.b) * double(r.h) * double(n) * double(n) * double(d) *
                                       (causal ? kCausalFlopFactor : 1.0);
              r.ms = median(times);
              r.tflops = (bwd ? kBackwardFlopFactor : 1.0) * fwd_flops / (r.ms / kMsPerSecond) / kFlopsPerTera;
              r.kernel = info.kernel;
            }
            print_row(r);
            rows.push_back(r);
          }
        }
      }
    }
  }

  if (!o.json_path.empty()) {
    JsonWriter j;
    j.begin_object().field("benchmark", "gpu_sweep").field("commit", commit_id()).field("date", utc_timestamp());
    j.key("gpu").begin_object().field("name", gpus.front().name).field("driver", driver_version());
    j.field("compute_capability", std::to_string(gpus.front().cc_major) + "." + std::to_string(gpus.front().cc_minor));
    j.field("sm_count", gpus.front().sm_count).field("cuda_runtime", gpus.front().runtime_version).end_object();
    j.field("version", version()).field("dtype", to_string(kDtype)).field("tokens", kTokens).field("hidden", kHidden);
    j.field("repeat", repeat).field("warmup", warmup);
    j.field("flops", "forward 4*b*h*N*N*d (x0.5 causal); backward 2.5x forward");
    j.key("rows").begin_array();
    for (const GpuRow& r : rows) {
      if (!r.skipped.empty()) continue;
      j.begin_object().field("algo", to_string(r.algo)).field("direction", r.backward ? "bwd" : "fwd");
      j.field("d", r.d).field("N", r.n).field("b", r.b).field("h", r.h).field("causal", r.causal);
      j.field("ms", r.ms).field("tflops", r.tflops).field("kernel", r.kernel).end_object();
    }
    j.end_array().key("skipped").begin_array();
    for (const GpuRow& r : rows) {
      if (r.skipped.empty()) continue;
      j.begin_object().field("algo", to_string(r.algo)).field("direction", r.backward ? "bwd" : "fwd");
      j.field("d", r.d).field("N", r.n).field("causal", r.causal).field("reason", r.skipped).end_object();
    }
    j.end_array().end_object();
    std::string error;
    if (!write_output(o.json_path, j.str() + "\n", &error)) {
      std::fprintf(stderr, "flashattn bench: %s\n", error.c_str());
      return kExitFailure;
    }
  }
  return errors == 0 ? kExitOk : kExitFailure;
}

}  // namespace flashattn::cli
