// `flashattn bench --gpu`: the sweep of the FlashAttention papers on one GPU.
//
// Every configuration holds 16384 tokens (batch = 16384 / seqlen) of hidden size 2048 (heads =
// 2048 / head_dim), so q, k, v, out and the gradients have the same number of elements in every row
// of the sweep: they are allocated once and viewed under each shape. Each tensor is 64 MiB in bf16,
// larger than the H100/H200 L2, so repeated runs do not time a warm cache.
//
// `--ablation`: the FA3 paper's ablation (its Table 2) on one shape, each fa3 variant with one overlap
// compiled out (forward_fa3_ablation) beside the full kernel and fa2.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_gpu_common.h"
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
constexpr double kBackwardFlopFactor = 2.5;
constexpr double kCausalFlopFactor = 0.5;  // the papers count half the pairs for causal
constexpr double kFlopsPerTera = 1e12;
constexpr double kMsPerSecond = 1e3;
constexpr uint64_t kGpuBenchSeed = 1;
constexpr DType kDtype = DType::kBFloat16;

// The ablation shape of the FA3 paper: batch 4, seqlen 8448, 16 heads, head_dim 128, bf16, non-causal.
// q, k, v and out are 132 MiB each: no run finds its inputs in L2.
constexpr int64_t kAblationBatch = 4;
constexpr int64_t kAblationSeqlen = 8448;
constexpr int64_t kAblationHeads = 16;
constexpr int64_t kAblationHeadDim = 128;
constexpr double kPercent = 100.0;

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

// One row of the ablation: an fa3 variant, or fa2 for comparison.
struct AblationRow {
  std::string name;  // "fa3 full", "fa3 no_ping_pong", "fa2"
  Algorithm algo = Algorithm::kFA3;
  Fa3Ablation variant = Fa3Ablation::kFull;
  double ms = 0, tflops = 0;
  std::string kernel;
  std::string skipped;  // non-empty: why the row did not run
};

// q, k, v, out and lse of the ablation shape, filled once.
struct AblationBuffers {
  DeviceAllocation q, k, v, out, lse;

  Status allocate_and_fill(int device) {
    const int64_t elems = kAblationBatch * kAblationSeqlen * kAblationHeads * kAblationHeadDim;
    const size_t bytes = size_t(elems * dtype_size(kDtype));
    for (DeviceAllocation* a : {&q, &k, &v, &out}) {
      Status s = a->allocate(bytes, device);
      if (!s.ok()) return s;
    }
    Status s = lse.allocate(size_t(kAblationBatch * kAblationHeads * kAblationSeqlen) * sizeof(float), device);
    if (!s.ok()) return s;
    std::vector<uint16_t> host(static_cast<size_t>(elems));
    std::mt19937_64 rng(kGpuBenchSeed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (DeviceAllocation* a : {&q, &k, &v}) {
      for (uint16_t& x : host) x = core::float_to_bf16_bits(dist(rng));
      s = a->copy_from_host(host.data(), host.size() * sizeof(uint16_t));
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  AttentionArgs args(Algorithm algo) const {
    constexpr int64_t kShape[] = {kAblationBatch, kAblationSeqlen, kAblationHeads, kAblationHeadDim};
    auto view = [&](const DeviceAllocation& a) {
      return TensorView::contiguous(a.data(), kDtype, int(std::size(kShape)), kShape, Device::kCUDA, 0);
    };
    AttentionArgs a;
    a.q = view(q);
    a.k = view(k);
    a.v = view(v);
    a.out = view(out);
    a.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {kAblationBatch, kAblationHeads, kAblationSeqlen},
                                   Device::kCUDA, 0);
    a.backend = Backend::kCUDA;
    a.algorithm = algo;
    return a;
  }
};

void print_ablation_row(const AblationRow& r, double full_tflops) {
  if (!r.skipped.empty()) {
    std::printf("%-30s %10s %8s %8s  skip (%s)\n", r.name.c_str(), "-", "-", "-", r.skipped.c_str());
  } else if (full_tflops > 0) {
    std::printf("%-30s %10.3f %8.1f %7.0f%%  %s\n", r.name.c_str(), r.ms, r.tflops, kPercent * r.tflops / full_tflops,
                r.kernel.c_str());
  } else {
    std::printf("%-30s %10.3f %8.1f %8s  %s\n", r.name.c_str(), r.ms, r.tflops, "-", r.kernel.c_str());
  }
  std::fflush(stdout);
}

int bench_ablation(const BenchOptions& o) {
  if (refuse_without_gpu("--gpu")) return kExitFailure;
  const std::vector<GpuInfo> gpus = list_gpus();
  const int repeat = gpu_repeat(o);
  const int warmup = gpu_warmup(o);
  Progress progress("bench");
  AblationBuffers buf;
  progress.phase("allocating and filling the ablation tensors");
  Status s = buf.allocate_and_fill(0);
  progress.done();
  if (!s.ok()) {
    std::fprintf(stderr, "flashattn bench: %s\n", s.to_string().c_str());
    return kExitFailure;
  }

  const double flops = 4.0 * double(kAblationBatch) * double(kAblationHeads) * double(kAblationSeqlen) *
                       double(kAblationSeqlen) * double(kAblationHeadDim);
  std::printf("gpu: %s, driver %s; fa3 ablation: bf16 b %lld N %lld h %lld d %lld non-causal; median of %d runs "
              "after %d warm-up runs and at least %.0f ms of them\n",
              gpus.front().name.c_str(), driver_version().c_str(), (long long)kAblationBatch,
              (long long)kAblationSeqlen, (long long)kAblationHeads, (long long)kAblationHeadDim, repeat, warmup,
              o.warmup_ms);
  std::printf("%-30s %10s %8s %8s  %s\n", "variant", "ms", "TFLOP/s", "of full", "kernel");

  std::vector<AblationRow> rows;
  for (Fa3Ablation v : {Fa3Ablation::kFull, Fa3Ablation::kNoWarpSpecialization, Fa3Ablation::kNoPingPong,
                        Fa3Ablation::kNoIntraWarpgroupOverlap}) {
    AblationRow r;
    r.name = std::string("fa3 ") + to_string(v);
    r.variant = v;
    rows.push_back(r);
  }
  AblationRow fa2;
  fa2.name = "fa2";
  fa2.algo = Algorithm::kFA2;
  rows.push_back(fa2);

  int errors = 0;
  double full_tflops = 0;
  for (AblationRow& r : rows) {
    const AttentionArgs args = buf.args(r.algo);
    RunInfo info;
    std::vector<double> times;
    progress.phase(r.name);
    s = time_calls(/*on_gpu=*/true, warmup, repeat,
                   [&] { return r.algo == Algorithm::kFA3 ? forward_fa3_ablation(args, r.variant, &info)
                                                          : forward(args, &info); },
                   &times, o.warmup_ms);
    progress.done();
    if (!s.ok()) {
      if (!is_skip(s)) {
        ++errors;
        std::fprintf(stderr, "flashattn bench: %s: %s\n", r.name.c_str(), s.to_string().c_str());
      }
      r.skipped = s.message();
    } else {
      r.ms = median(times);
      r.tflops = flops / (r.ms / kMsPerSecond) / kFlopsPerTera;
      r.kernel = info.kernel;
      if (r.algo == Algorithm::kFA3 && r.variant == Fa3Ablation::kFull) full_tflops = r.tflops;
    }
    print_ablation_row(r, full_tflops);
  }

  if (!o.json_path.empty()) {
    JsonWriter j;
    begin_gpu_result(j, "fa3_ablation", gpus.front());
    j.key("shape").begin_object().field("batch", kAblationBatch).field("seqlen", kAblationSeqlen);
    j.field("heads", kAblationHeads).field("head_dim", kAblationHeadDim).field("dtype", to_string(kDtype));
    j.field("causal", false).end_object();
    j.field("repeat", repeat).field("warmup", warmup).field("warmup_ms", o.warmup_ms);
    j.field("flops", "forward 4*b*h*N*N*d");
    j.key("rows").begin_array();
    for (const AblationRow& r : rows) {
      if (!r.skipped.empty()) continue;
      j.begin_object().field("name", r.name).field("algo", to_string(r.algo));
      if (r.algo == Algorithm::kFA3) j.field("variant", to_string(r.variant));
      j.field("ms", r.ms).field("tflops", r.tflops).field("kernel", r.kernel).end_object();
    }
    j.end_array().key("skipped").begin_array();
    for (const AblationRow& r : rows)
      if (!r.skipped.empty()) j.begin_object().field("name", r.name).field("reason", r.skipped).end_object();
    j.end_array();
    if (!finish_result(j, o.json_path)) return kExitFailure;
  }
  return errors == 0 ? kExitOk : kExitFailure;
}

}  // namespace

int bench_gpu(const BenchOptions& o) {
  if (o.ablation) return bench_ablation(o);
  if (refuse_without_gpu("--gpu")) return kExitFailure;
  const std::vector<GpuInfo> gpus = list_gpus();
  std::vector<Algorithm> algos = o.algorithms.empty() ? available_cuda_algorithms() : o.algorithms;
  const int repeat = gpu_repeat(o);
  const int warmup = gpu_warmup(o);
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

  std::printf("gpu: %s, driver %s; bf16, %lld tokens, hidden %lld; median of %d runs after %d warm-up runs and at "
              "least %.0f ms of them\n",
              gpus.front().name.c_str(), driver_version().c_str(), (long long)kTokens, (long long)kHidden, repeat,
              warmup, o.warmup_ms);
  std::printf("%-8s %-3s %4s %6s %3s %3s %-6s %10s %8s  %s\n", "algo", "dir", "d", "N", "b", "h", "causal", "ms",
              "TFLOP/s", "kernel");
  std::vector<GpuRow> rows;
  int errors = 0;
  for (Algorithm algo : algos) {
    for (int64_t d : head_dims) {
      for (int64_t n : seqlens) {
        for (bool causal : {false, true}) {
          for (bool bwd : {false, true}) {
            if (!(bwd ? o.backward : o.forward)) continue;
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
                             [&] { return bwd ? backward(args, &info) : forward(args.fwd, &info); }, &times,
                             o.warmup_ms);
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
    begin_gpu_result(j, "gpu_sweep", gpus.front());
    j.field("dtype", to_string(kDtype)).field("tokens", kTokens).field("hidden", kHidden);
    j.field("repeat", repeat).field("warmup", warmup).field("warmup_ms", o.warmup_ms);
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
    j.end_array();
    if (!finish_result(j, o.json_path)) return kExitFailure;
  }
  return errors == 0 ? kExitOk : kExitFailure;
}

}  // namespace flashattn::cli
