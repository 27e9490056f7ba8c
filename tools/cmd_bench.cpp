// `flashattn bench`: option parsing, and the CPU benchmark (forward GFLOP/s beside the SGEMM rate of the
// same machine, measured in the same run).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "api/problem.h"
#include "attention_case.h"
#include "bench.h"
#include "bench_gpu_common.h"
#include "blas_ceiling.h"
#include "cli_args.h"
#include "cli_common.h"
#include "commands.h"
#include "cpu/cpu_bench.h"
#include "device_buffers.h"
#include "flashattn/kvcache.h"
#include "json_writer.h"

namespace flashattn::cli {
namespace {

// Shapes of about a second each on a 2-core machine (fp32): batch 1, 8 heads, non-causal.
constexpr int64_t kCpuBatch = 1;
constexpr int64_t kCpuHeads = 8;
constexpr int64_t kCpuSeqlens[] = {2048, 4096};
constexpr int64_t kCpuHeadDims[] = {64, 128};
constexpr int64_t kCpuQuickSeqlen = 2048;
constexpr int kCpuDefaultRepeat = 3;
constexpr int kCpuDefaultWarmup = 1;
// The SGEMM ceiling: square products large enough to run at full rate, through OpenBLAS (every thread on
// one product: the machine's rate) and through the backend's own tile product (each thread its own).
constexpr int kBlasN = 2048;
constexpr int kSgemmN = 1024;
constexpr uint64_t kCpuBenchSeed = 1;  // benchmark inputs need not vary between runs
constexpr double kFlopsPerGiga = 1e9;
constexpr double kMsPerSecond = 1e3;
constexpr int kMaxRepeat = 10000;

struct CpuRow {
  int64_t seqlen = 0, head_dim = 0;
  double ms = 0, gflops = 0;
  std::string kernel;  // what the backend ran (bf16 and fp16 inputs: on AMX or on the fp32 products)
};

}  // namespace

int bench_cpu(const BenchOptions& o) {
  const int threads = o.threads > 0 ? o.threads : hardware_threads();
  const int repeat = o.repeat > 0 ? o.repeat : kCpuDefaultRepeat;
  const int warmup = o.warmup >= 0 ? o.warmup : kCpuDefaultWarmup;
  Progress progress("bench");

  progress.phase("measuring the SGEMM rate (OpenBLAS " + std::to_string(kBlasN) + "^3 and the tile product " +
                 std::to_string(kSgemmN) + "^3, " + std::to_string(threads) + " threads)");
  const BlasRate blas = measure_blas_sgemm(kBlasN, threads);
  const double tile_sgemm = detail::cpu_sgemm_gflops(threads, kSgemmN);
  progress.done();
  // The ceiling is the machine's BLAS rate; without OpenBLAS in the build, the tile product's own rate.
  const double sgemm = blas.available ? blas.gflops : tile_sgemm;

  const std::string model = cpu_model();
  std::printf("cpu: %s, %d threads\n", model.c_str(), threads);
  if (blas.available)
    std::printf("sgemm ceiling: OpenBLAS %d^3 on %d threads: %.1f GFLOP/s (%s)\n", kBlasN, blas.threads, blas.gflops,
                blas.library.c_str());
  else
    std::printf("sgemm ceiling: no OpenBLAS in this build; using the tile product's rate\n");
  std::printf("tile product (%s) %d^3 on %d threads: %.1f GFLOP/s\n", detail::cpu_sgemm_impl(), kSgemmN, threads,
              tile_sgemm);
  std::printf("inputs: %s\n", to_string(o.cpu_dtype));
  std::printf("%6s %4s %3s %3s %10s %9s %9s  %s\n", "N", "d", "b", "h", "ms", "GFLOP/s", "of sgemm", "kernel");
  std::fflush(stdout);

  std::vector<CpuRow> rows;
  for (int64_t n : kCpuSeqlens) {
    if (o.quick && n != kCpuQuickSeqlen) continue;
    for (int64_t d : kCpuHeadDims) {
      ProblemSpec spec;
      spec.batch = kCpuBatch;
      spec.seqlen_q = spec.seqlen_k = n;
      spec.heads_q = spec.heads_kv = kCpuHeads;
      spec.head_dim = d;
      spec.dtype = o.cpu_dtype;
      Target target;
      target.backend = Backend::kCPU;
      target.threads = o.threads;
      ProblemBuffers b;
      b.create(spec, /*backward=*/false, target);
      std::mt19937_64 rng(kCpuBenchSeed);
      b.fill(rng);
      detail::Problem problem;
      Status s = detail::make_problem(b.host_args(), &problem);
      std::vector<double> times;
      progress.phase("N " + std::to_string(n) + " d " + std::to_string(d));
      const AttentionArgs args = b.run_args();
      RunInfo info;
      if (s.ok()) s = check_supported(args, &info);
      if (s.ok()) s = time_calls(/*on_gpu=*/false, warmup, repeat, [&] { return forward(args); }, &times);
      progress.done();
      if (!s.ok()) {
        std::fprintf(stderr, "flashattn bench: cpu forward N %lld d %lld: %s\n", (long long)n, (long long)d,
                     s.to_string().c_str());
        return kExitFailure;
      }
      CpuRow r;
      r.seqlen = n;
      r.head_dim = d;
      r.ms = median(times);
      r.gflops = problem.forward_flops() / (r.ms / kMsPerSecond) / kFlopsPerGiga;
      r.kernel = info.kernel;
      rows.push_back(r);
      std::printf("%6lld %4lld %3lld %3lld %10.2f %9.1f %8.0f%%  %s\n", (long long)n, (long long)d,
                  (long long)kCpuBatch, (long long)kCpuHeads, r.ms, r.gflops, sgemm > 0 ? 100.0 * r.gflops / sgemm : 0.0,
                  r.kernel.c_str());
      std::fflush(stdout);
    }
  }

  if (o.json_path.empty()) return kExitOk;
  JsonWriter j;
  begin_cpu_result(j, "cpu_forward", model, threads);
  j.field("dtype", to_string(o.cpu_dtype)).field("causal", false);
  j.field("repeat", repeat).field("warmup", warmup);
  j.key("sgemm").begin_object().field("source", blas.available ? "openblas" : "tile_product");
  j.field("gflops", sgemm).end_object();
  j.key("openblas").begin_object().field("available", blas.available).field("n", kBlasN);
  j.field("threads", blas.threads).field("gflops", blas.gflops).field("config", blas.library).end_object();
  j.key("tile_product").begin_object().field("impl", detail::cpu_sgemm_impl()).field("n", kSgemmN);
  j.field("threads", threads).field("gflops", tile_sgemm).end_object();
  j.key("rows").begin_array();
  for (const CpuRow& r : rows) {
    j.begin_object().field("N", r.seqlen).field("d", r.head_dim).field("b", kCpuBatch).field("h", kCpuHeads);
    j.field("ms", r.ms).field("gflops", r.gflops).field("ratio_to_sgemm", sgemm > 0 ? r.gflops / sgemm : 0.0);
    j.field("kernel", r.kernel).end_object();
  }
  j.end_array();
  return finish_result(j, o.json_path) ? kExitOk : kExitFailure;
}

int cmd_bench(int argc, char** argv, int first) {
  BenchOptions o;
  std::string backend = "cpu";
  ArgParser parser("bench",
                   "flashattn bench [--backend cpu] [--dtype fp32|bf16|fp16] [--threads T] [--quick] [--repeat R]\n"
                   "                [--warmup W] [--json FILE]\n"
                   "       flashattn bench --gpu [--algo fa3,fa2,fa1,standard] [--dir fwd|bwd|both] [--quick]\n"
                   "                       [--repeat R] [--warmup W] [--warmup-ms MS] [--json FILE]\n"
                   "       flashattn bench --gpu --ablation [--repeat R] [--warmup W] [--warmup-ms MS] [--json FILE]\n"
                   "       flashattn bench --gpu --decode [--splits S] [--repeat R] [--warmup W] [--json FILE]\n"
                   "       flashattn bench --backend cpu --decode [--threads T] [--splits S] [--quick] [--repeat R]\n"
                   "                       [--warmup W] [--json FILE]",
                   "CPU (default): forward GFLOP/s at seqlen 2048 and 4096, head_dim 64 and 128 (batch 1, 8 heads,\n"
                   "non-causal; fp32 inputs unless --dtype), beside this machine's SGEMM rate measured in the same\n"
                   "run, and the kernel that ran (bf16 and fp16 inputs run on AMX where the CPU has it;\n"
                   "FLASHATTN_CPU_AMX=0 turns that off).\n"
                   "GPU (--gpu): the FlashAttention papers' sweep in bf16: 16384 tokens (batch = 16384 / seqlen),\n"
                   "hidden 2048 (heads = 2048 / head_dim), head_dim 64/128/256, seqlen 512..16k, causal and not,\n"
                   "forward and backward (--dir: one of them). FLOPs: forward 4*B*H*N*N*d (half for causal),\n"
                   "backward 2.5x forward.\n"
                   "CUDA events, median of the timed runs after the warm-up runs and at least 200 ms of them (sweep\n"
                   "and ablation, --warmup-ms: the GPU at its power limit runs at a lower clock after ~0.1 s of\n"
                   "load, and its clock is still falling after 200 ms; bench/peers_sdpa.py warms up the same way,\n"
                   "bench/interleaved.py times ours and a peer in alternating rounds at one clock). JSON rows\n"
                   "carry the commit, machine and date.\n"
                   "GPU --ablation: the FA3 paper's ablation at batch 4, seqlen 8448, 16 heads, head_dim 128, bf16,\n"
                   "non-causal: fa3 full, without warp specialization, without ping-pong, without intra-warpgroup\n"
                   "overlap, and fa2, in TFLOP/s (4*B*H*N*N*d) and as a share of full fa3. A variant the build or\n"
                   "the GPU does not offer prints 'skip (reason)'.\n"
                   "GPU --decode: the KV-cache (decode) kernels, bf16, 32 query heads over 8 KV heads, head_dim 128,\n"
                   "one query token: (batch, seqlen_k) = (1, 32k), (1, 128k), (16, 8k), (64, 4k), each with a\n"
                   "contiguous and a paged (page size 16) cache. TB/s of K and V read once, beside the device copy\n"
                   "rate measured in the same run; kernel time from calls queued back to back, and the time of one\n"
                   "forward_kvcache call (index validation included). --splits forces that many KV splits on\n"
                   "every call (default: the backend's heuristic).\n"
                   "CPU --decode (--backend cpu): the same shapes on the CPU backend, GB/s of K and V read once\n"
                   "per forward_kvcache call, beside the rate at which the same threads read memory (--quick:\n"
                   "batch 1 x 32k only).");
  parser.add_custom("backend", "NAME", "cpu or cuda (cuda = --gpu)", "cpu", [&](const std::string& t, std::string* e) {
    if (t == "cpu" || t == "cuda") {
      backend = t;
      return true;
    }
    *e = "expects cpu or cuda, got '" + t + "'";
    return false;
  });
  parser.add_flag("gpu", &o.gpu, "run the GPU sweep instead of the CPU benchmark");
  parser.add_custom("algo", "LIST", "GPU algorithms, comma-separated (fa3,fa2,fa1,standard)\n",
                    "every available CUDA algorithm",
                    [&](const std::string& t, std::string* e) { return parse_algorithm_list(t, &o.algorithms, e); });
  parser.add_flag("quick", &o.quick,
                  "a trimmed sweep (GPU: seqlen 1k/4k/16k, head_dim 64/128; CPU: seqlen 2048; CPU\n"
                  "--decode: batch 1 x 32k)");
  parser.add_custom("dir", "DIR", "GPU sweep: fwd, bwd or both directions", "both",
                    [&](const std::string& t, std::string* e) {
                      if (t != "fwd" && t != "bwd" && t != "both") {
                        *e = "expects fwd, bwd or both, got '" + t + "'";
                        return false;
                      }
                      o.forward = t != "bwd";
                      o.backward = t != "fwd";
                      return true;
                    });
  parser.add_flag("ablation", &o.ablation, "GPU: the fa3 ablation on one shape instead of the sweep");
  parser.add_flag("decode", &o.decode,
                  "the KV-cache (decode) bandwidth benchmark instead of the sweep (GPU; the CPU\n"
                  "backend's with --backend cpu)");
  parser.add_int("splits", &o.splits, "S", "--decode: KV splits per sequence (0 = the backend's choice)", 0,
                 kMaxKVSplits);
  parser.add_int("threads", &o.threads, "T", "CPU worker threads (0 = all hardware threads)", 0, kMaxThreads);
  parser.add_custom("dtype", "T", "CPU sweep: dtype of the inputs (fp32, bf16 or fp16)", "fp32",
                    [&](const std::string& t, std::string* e) { return parse_dtype(t, &o.cpu_dtype, e); });
  parser.add_int("repeat", &o.repeat, "R", "timed runs per shape (0 = 3 on cpu, 5 for cpu --decode, 10 on gpu)", 0,
                 kMaxRepeat);
  parser.add_int("warmup", &o.warmup, "W", "untimed runs first (-1 = 1 on cpu, 3 on gpu; sweep, ablation: >= 200 ms)",
                 -1, kMaxRepeat);
  parser.add_real("warmup-ms", &o.warmup_ms, "MS",
                  "GPU sweep and --ablation: keep warming each row up until the untimed runs have\n"
                  "taken MS ms (the clock an H200 settles at under its power limit is still falling\n"
                  "after 200 ms; see docs/performance.md)",
                  0.0);
  parser.add_text("json", &o.json_path, "FILE", "also write the results as JSON to FILE ('-' = stdout)");
  switch (parser.parse(argc, argv, first)) {
    case ArgParser::Outcome::kHelpShown: return kExitOk;
    case ArgParser::Outcome::kUsageError: return kExitUsage;
    case ArgParser::Outcome::kRun: break;
  }
  // --decode alone is the GPU benchmark; --backend cpu --decode the CPU one.
  if (backend == "cuda" || (o.decode && !parser.given("backend"))) o.gpu = true;
  if (o.decode && (parser.given("algo") || (o.gpu && o.quick) || o.ablation)) {
    parser.usage_error(std::string("--") + (o.ablation ? "ablation" : parser.given("algo") ? "algo" : "quick") +
                       " does not apply to " + (o.gpu ? "--gpu --decode" : "--decode"));
    return kExitUsage;
  }
  if (!o.decode && parser.given("splits")) {
    parser.usage_error("--splits applies to --decode only");
    return kExitUsage;
  }
  if (!o.gpu && (parser.given("algo") || o.ablation)) {
    parser.usage_error(std::string("--") + (o.ablation ? "ablation" : "algo") + " applies to the GPU sweep (--gpu)");
    return kExitUsage;
  }
  if (o.ablation && (parser.given("algo") || o.quick)) {
    parser.usage_error(std::string("--") + (o.quick ? "quick" : "algo") + " applies to the sweep, not to --ablation");
    return kExitUsage;
  }
  if (parser.given("dir") && (!o.gpu || o.ablation || o.decode)) {
    parser.usage_error("--dir applies to the GPU sweep only (--gpu, without --ablation or --decode)");
    return kExitUsage;
  }
  if (parser.given("warmup-ms") && (!o.gpu || o.decode)) {
    parser.usage_error("--warmup-ms applies to the GPU sweep and --ablation only");
    return kExitUsage;
  }
  if ((o.gpu || o.decode) && parser.given("dtype")) {
    parser.usage_error("--dtype applies to the CPU sweep only (the GPU sweep and --decode run bf16)");
    return kExitUsage;
  }
  if (o.gpu && parser.given("threads")) {
    parser.usage_error("--threads applies to the CPU benchmark only");
    return kExitUsage;
  }
  if (o.decode) return o.gpu ? bench_decode(o) : bench_decode_cpu(o);
  return o.gpu ? bench_gpu(o) : bench_cpu(o);
}

}  // namespace flashattn::cli
