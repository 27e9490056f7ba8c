// `flashattn run`: one attention problem with seeded random inputs, timed, and spot-checked against the
// float64 reference.
//
// The big problem is checked on a sample of query rows (the reference computes single rows in float64);
// with --backward the gradients cannot be checked row by row, so a reduced copy of the problem (same
// dtype, head_dim, heads ratio and masks, shorter sequences) is checked in full with the test suites'
// tolerance rule, and the big problem's gradients are checked for unwritten or non-finite elements.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "api/problem.h"
#include "attention_case.h"
#include "cli_args.h"
#include "cli_common.h"
#include "commands.h"
#include "device_buffers.h"
#include "flashattn/kvcache.h"
#include "json_writer.h"
#include "run_shared.h"
#include "verify.h"

namespace flashattn::cli {
namespace {

constexpr int64_t kMaxExtent = int64_t(1) << 31;  // any larger dimension overflows the int32 varlen offsets
constexpr int kDefaultRepeatGpu = 20;
constexpr int kDefaultRepeatCpu = 3;
constexpr int kDefaultWarmupGpu = 3;
constexpr int kDefaultWarmupCpu = 1;
constexpr int kMaxRepeat = 100000;
constexpr int kMaxSamples = 1 << 20;
constexpr uint64_t kReducedStream = 0xc2b2ae3d27d4eb4full;  // the reduced backward copy's inputs
// The reduced copy that checks --backward gradients in full: short enough for the float64 reference.
constexpr int64_t kReducedMaxSeqlen = 256;
constexpr int64_t kReducedMaxKvHeads = 2;
constexpr int64_t kReducedMaxGroup = 8;
constexpr double kBackwardFlopFactor = 2.5;  // the FlashAttention papers' convention: bwd = 2.5x fwd
constexpr double kFlopsPerTera = 1e12;
constexpr double kFlopsPerGiga = 1e9;
// The options that only the KV-cache mode reads, and those that only the attention mode reads.
constexpr const char* kKvOnlyOptions[] = {"cache-len",      "new-tokens", "page-size",
                                          "cache-capacity", "splits",     "no-check-indices"};
constexpr const char* kAttentionOnlyOptions[] = {"seqlen-k", "backward", "deterministic"};

// A dimension of the problem: an integer in [1, kMaxExtent].
bool parse_extent(const std::string& text, int64_t* value, std::string* error) {
  int64_t v = 0;
  if (!parse_int64(text, &v, error)) return false;
  if (v < 1 || v > kMaxExtent) {
    *error = "must be in [1, " + std::to_string(kMaxExtent) + "], got " + text;
    return false;
  }
  *value = v;
  return true;
}

void register_options(ArgParser* p, RunOptions* o) {
  p->add_int("batch", &o->batch, "B", "batch size", 1, kMaxExtent);
  p->add_int("seqlen-q", &o->seqlen_q, "N", "query sequence length (1 with --kv-cache)", 1, kMaxExtent);
  p->add_custom("seqlen-k", "M", "key/value sequence length", "seqlen-q",
                [o](const std::string& t, std::string* e) { return parse_extent(t, &o->seqlen_k, e); });
  p->add_int("heads", &o->heads, "H", "query heads", 1, kMaxExtent);
  p->add_custom("heads-kv", "HK", "key/value heads; H must be a multiple of HK", "heads",
                [o](const std::string& t, std::string* e) { return parse_extent(t, &o->heads_kv, e); });
  p->add_int("head-dim", &o->head_dim, "D", "head dimension", 1, kMaxExtent);
  p->add_flag("causal", &o->causal, "causal mask, aligned bottom-right when seqlen-q != seqlen-k");
  p->add_custom(
      "window", "L,R",
      "local window: query i sees keys i+off-L .. i+off+R, off = seqlen-k - seqlen-q\n(-1 = unbounded)", "-1,-1",
      [o](const std::string& t, std::string* e) { return parse_window(t, &o->window_left, &o->window_right, e); });
  p->add_real("softcap", &o->softcap, "C", "soft cap c*tanh(s/c) on the scaled scores (0 = off)", 0.0);
  p->add_real("scale", &o->scale, "S", "softmax scale (0 = 1/sqrt(head-dim))", 0.0);
  p->add_custom("dtype", "T", "bf16, fp16 or fp32", "bf16 on cuda, fp32 on cpu",
                [o](const std::string& t, std::string* e) { return parse_dtype(t, &o->dtype, e); });
  p->add_custom("backend", "NAME",
                "auto, cpu or cuda (auto: cuda when a device and an algorithm\nfor the dtype are present, else cpu)",
                "auto", [o](const std::string& t, std::string* e) {
                  if (parse_backend(t, &o->backend)) return true;
                  *e = "expects auto, cpu or cuda, got '" + t + "'";
                  return false;
                });
  p->add_custom("algo", "NAME", "auto, standard, fa1, fa2 or fa3", "auto", [o](const std::string& t, std::string* e) {
    if (parse_algorithm(t, &o->algorithm)) return true;
    *e = "expects auto, standard, fa1, fa2 or fa3, got '" + t + "'";
    return false;
  });
  p->add_flag("backward", &o->backward, "also run and time the backward pass");
  p->add_flag("deterministic", &o->deterministic, "bitwise-reproducible backward");
  p->add_int("threads", &o->threads, "T", "cpu worker threads (0 = all hardware threads)", 0, kMaxThreads);
  p->add_int("repeat", &o->repeat, "R", "timed runs, the median is reported (0 = 20 on cuda, 3 on cpu)", 0, kMaxRepeat);
  p->add_int("warmup", &o->warmup, "W", "untimed runs first (-1 = 3 on cuda, 1 on cpu)", -1, kMaxRepeat);
  p->add_real("warmup-ms", &o->warmup_ms, "MS",
              "and keep warming up until the untimed runs have taken MS ms (0 = off;\n"
              "200 times a GPU at the clock it sustains under its power limit)",
              0.0);
  p->add_int("samples", &o->samples, "K",
             "random rows checked against the float64 reference\n(the first and last row are always checked)", 0,
             kMaxSamples);
  p->add_custom("seed", "S", "seed of the random inputs", "$FLASHATTN_SEED, else the clock",
                [o](const std::string& t, std::string* e) { return parse_seed(t, &o->seed, e); });
  p->add_flag("json", &o->json, "print the result as JSON on stdout");
  p->add_flag("kv-cache", &o->kv_cache,
              "KV-cache mode: forward_kvcache, seqlen-q new queries against a\ncache of random tokens");
  p->add_custom("cache-len", "N[,N...]",
                "--kv-cache: tokens already in the cache, one for every sequence\nor one per sequence", "0",
                [o](const std::string& t, std::string* e) { return parse_cache_lens(t, &o->cache_lens, e); });
  p->add_int("new-tokens", &o->new_tokens, "K", "--kv-cache: k/v tokens the call appends to each sequence", 0,
             kMaxExtent);
  p->add_int("page-size", &o->page_size, "P", "--kv-cache: paged cache of P-token pages (0 = contiguous)", 0,
             kMaxExtent);
  p->add_int("cache-capacity", &o->cache_capacity, "N",
             "--kv-cache: tokens each sequence's cache holds (0 = cache-len +\nnew-tokens)", 0, kMaxExtent);
  p->add_int("splits", &o->splits, "S", "--kv-cache: KV splits per sequence (0 = the library's heuristic)", 0,
             kMaxKVSplits);
  p->add_flag("no-check-indices", &o->no_check_indices,
              "--kv-cache: trust cache_seqlens and block_table in device memory\n(no host copy, no stream wait)");
}

// The first option given that the chosen mode does not read, or nullptr.
template <size_t N>
const char* first_given(const ArgParser& p, const char* const (&names)[N]) {
  for (const char* name : names)
    if (p.given(name)) return name;
  return nullptr;
}

// The CLI places the tensors itself, so `auto` is decided here: cuda when a device is present and an
// available algorithm takes the dtype (bf16 unless --dtype says otherwise), else cpu in fp32.
void resolve_placement(const ArgParser& p, RunOptions* o) {
  const bool dtype_given = p.given("dtype");
  if (o->backend == Backend::kAuto) {
    const DType wanted = dtype_given ? o->dtype : DType::kBFloat16;
    o->backend = cuda_offers(o->algorithm, wanted) ? Backend::kCUDA : Backend::kCPU;
  }
  if (!dtype_given) o->dtype = o->backend == Backend::kCUDA ? DType::kBFloat16 : DType::kFloat32;
  if (!p.given("seqlen-k")) o->seqlen_k = o->seqlen_q;
  if (!p.given("heads-kv")) o->heads_kv = o->heads;
  const bool gpu = o->backend == Backend::kCUDA;
  if (o->repeat == 0) o->repeat = gpu ? kDefaultRepeatGpu : kDefaultRepeatCpu;
  if (o->warmup < 0) o->warmup = gpu ? kDefaultWarmupGpu : kDefaultWarmupCpu;
}

ProblemSpec make_spec(const RunOptions& o) {
  ProblemSpec s;
  s.batch = o.batch;
  s.seqlen_q = o.seqlen_q;
  s.seqlen_k = o.seqlen_k;
  s.heads_q = o.heads;
  s.heads_kv = o.heads_kv;
  s.head_dim = o.head_dim;
  s.causal = o.causal;
  s.window_left = o.window_left;
  s.window_right = o.window_right;
  s.softcap = float(o.softcap);
  s.scale = float(o.scale);
  s.dtype = o.dtype;
  return s;
}

// The copy whose gradients are checked in full: both lengths shrunk by one factor (so seqlen_q < seqlen_k
// stays so, and the bottom-right mask keeps its shape), at most two KV heads and eight queries per KV head.
ProblemSpec reduced_copy(const ProblemSpec& s) {
  ProblemSpec r = s;
  r.batch = 1;
  const double longest = double(std::max(s.seqlen_q, s.seqlen_k));
  const double factor = std::min(1.0, double(kReducedMaxSeqlen) / longest);
  r.seqlen_q = std::max<int64_t>(1, int64_t(std::lround(double(s.seqlen_q) * factor)));
  r.seqlen_k = std::max<int64_t>(1, int64_t(std::lround(double(s.seqlen_k) * factor)));
  const int64_t group = s.heads_kv > 0 ? s.heads_q / s.heads_kv : 1;
  r.heads_kv = std::min(s.heads_kv, kReducedMaxKvHeads);
  r.heads_q = r.heads_kv * std::min(std::max<int64_t>(group, 1), kReducedMaxGroup);
  return r;
}

// Compares sampled rows of the big forward with reference::forward_row.
Status check_rows(const ProblemBuffers& b, const RunOptions& o, RowCheck* rc) {
  const ProblemSpec& s = b.spec();
  const std::vector<reference::RowId> rows = sample_rows(s.batch, s.heads_q, s.seqlen_q, o.samples, o.seed);
  const AttentionArgs host = b.host_args();
  double max_abs_lse = 1.0;
  double magnitude = 0;  // max |out| of the reference rows
  std::vector<double> ref_out;
  for (const reference::RowId& id : rows) {
    double ref_lse = 0;
    Status st = reference::forward_row(host, id, &ref_out, &ref_lse);
    if (!st.ok()) return st;
    const int64_t base = ((id.batch * s.seqlen_q + id.row) * s.heads_q + id.head) * s.head_dim;
    for (int64_t d = 0; d < s.head_dim; ++d) {
      magnitude = std::max(magnitude, std::fabs(ref_out[size_t(d)]));
      const double got = b.out.get(base + d);
      const double diff =
          std::isnan(got) ? std::numeric_limits<double>::infinity() : std::fabs(got - ref_out[size_t(d)]);
      rc->out_error = std::max(rc->out_error, diff);
    }
    const int64_t lse_index = (id.batch * s.heads_q + id.head) * s.seqlen_q + id.row;
    rc->lse_error = std::max(rc->lse_error, lse_max_diff(std::vector<double>{b.lse.get(lse_index)}, {ref_lse}));
    if (std::isfinite(ref_lse)) max_abs_lse = std::max(max_abs_lse, std::fabs(ref_lse));
  }
  rc->rows = int(rows.size());
  rc->out_bound = sampled_out_bound(s.dtype, magnitude);
  rc->lse_bound = sampled_lse_bound(s.dtype, max_abs_lse);
  return Status::Ok();
}

// Non-finite or never-written gradient elements of the big problem (the reduced copy checks values).
int64_t bad_gradients(const ProblemBuffers& b) {
  int64_t bad = 0;
  for (const harness::HostTensor* t : {&b.dq, &b.dk, &b.dv})
    for (int64_t i = 0; i < t->numel(); ++i)
      if (!std::isfinite(t->get(i))) ++bad;
  return bad;
}

// Everything one run measured and checked, for the text and JSON reports.
struct RunResult {
  ProblemSpec spec;
  double scale = 0;  // resolved softmax scale
  RunInfo fwd_info, bwd_info;
  Timing fwd, bwd;
  RowCheck rows;
  int64_t bad_grads = 0;  // non-finite or unwritten gradient elements of the timed problem
  ProblemSpec reduced_spec;
  CheckOutcome reduced;
  bool determinism_checked = false;  // --deterministic --backward: a second backward compared bitwise
  bool bitwise_equal = true;

  // A reduced copy the backend declines is reported as a skip; it cannot fail the run.
  bool backward_pass() const { return bad_grads == 0 && reduced.kind != CheckOutcome::Kind::kFail && bitwise_equal; }
};

// The latency of one call on the GPU: `repeat` calls each timed alone (no warm-up needed right after the
// timed ones), their median into t->alone_ms.
Status time_alone(const std::function<Status()>& call, int repeat, Timing* t) {
  std::vector<double> times;
  Status s = time_calls(/*on_gpu=*/true, 0, repeat, call, &times, 0, GpuTiming::kEachAlone);
  if (s.ok()) t->alone_ms = median(times);
  return s;
}

// Runs the problem; a non-ok Status names the step that failed in *step.
Status execute(const RunOptions& o, const Target& target, RunResult* r, const char** step) {
  const bool gpu = target.backend == Backend::kCUDA;
  Progress progress("run");
  ProblemBuffers b;
  progress.phase("allocating and filling random inputs");
  b.create(r->spec, o.backward, target);
  std::mt19937_64 rng(o.seed);
  b.fill(rng);
  progress.phase("copying inputs to the device");
  *step = "upload";
  Status s = b.upload();
  progress.done();
  if (!s.ok()) return s;

  *step = "forward";
  const AttentionArgs args = b.run_args();
  if (s = check_supported(args, &r->fwd_info); !s.ok()) return s;
  detail::Problem problem;
  if (s = detail::make_problem(b.host_args(), &problem); !s.ok()) return s;
  r->scale = problem.scale;
  std::vector<double> times;
  const std::string runs = warmup_text(o) + " + " + std::to_string(o.repeat) + " runs";
  progress.phase("timing the forward (" + runs + ")");
  s = time_calls(
      gpu, o.warmup, o.repeat, [&] { return forward(args, &r->fwd_info); }, &times, o.warmup_ms);
  progress.done();
  if (!s.ok()) return s;
  r->fwd = summarize(times, problem.forward_flops());
  if (gpu) {
    s = time_alone([&] { return forward(args, &r->fwd_info); }, o.repeat, &r->fwd);
    if (!s.ok()) return s;
  }

  *step = "download";
  if (s = b.download_forward(); !s.ok()) return s;
  r->rows.unwritten = unwritten_forward(b);
  *step = "reference";
  progress.phase("checking sampled rows against the float64 reference");
  s = check_rows(b, o, &r->rows);
  progress.done();
  if (!s.ok() || !o.backward) return s;

  *step = "backward";
  const BackwardArgs bargs = b.run_backward_args();
  if (s = check_supported(bargs, &r->bwd_info); !s.ok()) return s;
  progress.phase("timing the backward (" + runs + ")");
  s = time_calls(
      gpu, o.warmup, o.repeat, [&] { return backward(bargs, &r->bwd_info); }, &times, o.warmup_ms);
  progress.done();
  if (!s.ok()) return s;
  r->bwd = summarize(times, kBackwardFlopFactor * r->fwd.flops);
  if (gpu) {
    s = time_alone([&] { return backward(bargs, &r->bwd_info); }, o.repeat, &r->bwd);
    if (!s.ok()) return s;
  }
  *step = "download";
  if (s = b.download_backward(); !s.ok()) return s;
  r->bad_grads = bad_gradients(b);

  if (o.deterministic) {
    // Deterministic mode promises bitwise-equal gradients: run once more and compare every byte.
    const harness::HostTensor dq = b.dq, dk = b.dk, dv = b.dv;
    *step = "backward";
    if (s = backward(bargs, &r->bwd_info); !s.ok()) return s;
    *step = "download";
    if (s = b.download_backward(); !s.ok()) return s;
    r->determinism_checked = true;
    r->bitwise_equal = dq.storage == b.dq.storage && dk.storage == b.dk.storage && dv.storage == b.dv.storage;
  }

  r->reduced_spec = reduced_copy(r->spec);
  progress.phase("checking the gradients of a reduced copy (" + r->reduced_spec.describe() + ") in full");
  r->reduced = verify_backward(r->reduced_spec, target, o.seed ^ kReducedStream);
  progress.done();
  return Status::Ok();
}

const char* outcome_text(CheckOutcome::Kind k) {
  switch (k) {
    case CheckOutcome::Kind::kPass: return "pass";
    case CheckOutcome::Kind::kSkip: return "skip";
    case CheckOutcome::Kind::kFail: return "fail";
  }
  return "fail";
}

void json_timing(JsonWriter* j, const char* key, const Timing& t) {
  j->key(key).begin_object();
  j->field("ms", t.median_ms).field("ms_min", t.min_ms).field("runs", t.runs);
  if (t.alone_ms > 0) j->field("ms_alone", t.alone_ms);
  j->field("flops", t.flops).field("tflops", t.tflops()).end_object();
}

void report_json(const RunOptions& o, const RunResult& r, bool pass) {
  const ProblemSpec& spec = r.spec;
  JsonWriter j;
  j.begin_object().field("seed", o.seed);
  j.key("problem").begin_object();
  j.field("batch", spec.batch).field("seqlen_q", spec.seqlen_q).field("seqlen_k", spec.seqlen_k);
  j.field("heads", spec.heads_q).field("heads_kv", spec.heads_kv).field("head_dim", spec.head_dim);
  j.field("causal", spec.causal).field("window_left", spec.window_left).field("window_right", spec.window_right);
  j.field("softcap", double(spec.softcap)).field("scale", r.scale).field("dtype", to_string(spec.dtype));
  j.end_object();
  j.field("backend", to_string(r.fwd_info.backend)).field("algorithm", to_string(r.fwd_info.algorithm));
  j.field("kernel", r.fwd_info.kernel);
  if (r.fwd_info.backend == Backend::kCPU) j.field("threads", o.threads > 0 ? o.threads : hardware_threads());
  json_timing(&j, "forward", r.fwd);
  j.key("forward_check").begin_object().field("rows", r.rows.rows).field("out_error", r.rows.out_error);
  j.field("out_bound", r.rows.out_bound).field("lse_error", r.rows.lse_error).field("lse_bound", r.rows.lse_bound);
  j.field("unwritten", r.rows.unwritten).field("pass", r.rows.pass()).end_object();
  if (o.backward) {
    j.field("backward_kernel", r.bwd_info.kernel);
    json_timing(&j, "backward", r.bwd);
    j.key("backward_check").begin_object().field("non_finite_gradients", r.bad_grads);
    if (r.determinism_checked) j.field("bitwise_equal_rerun", r.bitwise_equal);
    j.field("reduced_problem", r.reduced_spec.describe()).field("status", outcome_text(r.reduced.kind));
    if (!r.reduced.reason.empty()) j.field("reason", r.reduced.reason);
    j.key("tensors").begin_object();
    for (const TensorCheck& t : r.reduced.tensors) {
      j.key(t.name).begin_object().field("error", t.verdict.error).field("bound", t.verdict.bound);
      j.field("naive_error", t.verdict.naive_error).end_object();
    }
    j.end_object().field("pass", r.backward_pass()).end_object();
  }
  j.field("pass", pass).end_object();
  std::printf("%s\n", j.str().c_str());
}

// TFLOP/s on the GPU; GFLOP/s on the CPU, whose rates would print as 0.0x TFLOP/s.
void print_timing(const char* label, const Timing& t, bool gpu) {
  const double rate = gpu ? t.tflops() : t.tflops() * kFlopsPerTera / kFlopsPerGiga;
  std::printf("%-10s %.3f ms  (median of %d, min %.3f ms)  %.2f GFLOP  %.2f %s", label, t.median_ms, t.runs, t.min_ms,
              t.flops / kFlopsPerGiga, rate, gpu ? "TFLOP/s" : "GFLOP/s");
  if (t.alone_ms > 0) std::printf("  (one call alone: %.3f ms)", t.alone_ms);
  std::printf("\n");
}

void report_text(const RunOptions& o, const RunResult& r, bool pass) {
  const bool gpu = r.fwd_info.backend == Backend::kCUDA;
  std::printf("ran        %s %s  kernel %s", to_string(r.fwd_info.backend), to_string(r.fwd_info.algorithm),
              r.fwd_info.kernel.c_str());
  if (!gpu) std::printf("  (%d threads)", o.threads > 0 ? o.threads : hardware_threads());
  std::printf("\n");
  print_timing("forward", r.fwd, gpu);
  const std::string unwritten =
      r.rows.unwritten > 0 ? ", " + std::to_string(r.rows.unwritten) + " elements never written" : "";
  std::printf("check      forward: %d rows vs float64 reference: out err %s <= %s, lse err %s <= %s%s  %s\n",
              r.rows.rows, sci(r.rows.out_error).c_str(), sci(r.rows.out_bound).c_str(), sci(r.rows.lse_error).c_str(),
              sci(r.rows.lse_bound).c_str(), unwritten.c_str(), r.rows.pass() ? "PASS" : "FAIL");
  if (o.backward) {
    std::printf("ran        backward kernel %s\n", r.bwd_info.kernel.c_str());
    print_timing("backward", r.bwd, gpu);
    std::printf("check      backward: %lld non-finite or unwritten gradient elements in the timed problem  %s\n",
                (long long)r.bad_grads, r.bad_grads == 0 ? "PASS" : "FAIL");
    if (r.determinism_checked)
      std::printf("check      deterministic: a second backward gives %s gradients  %s\n",
                  r.bitwise_equal ? "bitwise-equal" : "DIFFERENT", r.bitwise_equal ? "PASS" : "FAIL");
    std::printf("check      backward on a reduced copy %s: ", r.reduced_spec.describe().c_str());
    if (r.reduced.kind == CheckOutcome::Kind::kSkip) {
      std::printf("skip (%s)\n", r.reduced.reason.c_str());
    } else if (!r.reduced.reason.empty()) {
      std::printf("%s  FAIL\n", r.reduced.reason.c_str());
    } else {
      for (const TensorCheck& t : r.reduced.tensors)
        std::printf("%s %s <= %s  ", t.name.c_str(), sci(t.verdict.error).c_str(), sci(t.verdict.bound).c_str());
      std::printf("%s\n", r.reduced.kind == CheckOutcome::Kind::kPass ? "PASS" : "FAIL");
    }
  }
  std::printf("result     %s\n", pass ? "PASS" : "FAIL");
}

}  // namespace

int cmd_run(int argc, char** argv, int first) {
  RunOptions o;
  ArgParser parser("run",
                   "flashattn run [--batch B] [--seqlen-q N] [--seqlen-k M] [--heads H] [--heads-kv HK]\n"
                   "                     [--head-dim D] [--causal] [--window L,R] [--softcap C] [--scale S]\n"
                   "                     [--dtype bf16|fp16|fp32] [--backend auto|cpu|cuda]\n"
                   "                     [--algo auto|standard|fa1|fa2|fa3] [--backward] [--deterministic]\n"
                   "                     [--threads T] [--repeat R] [--warmup W] [--warmup-ms MS] [--samples K]\n"
                   "                     [--seed S] [--json]\n"
                   "       flashattn run --kv-cache [--cache-len N[,N...]] [--new-tokens K] [--page-size P]\n"
                   "                     [--cache-capacity N] [--splits S] [--no-check-indices] [--seqlen-q N]\n"
                   "                     and the options above but --seqlen-k, --backward and --deterministic",
                   "Runs one attention problem on random inputs (seeded; the seed is printed), times it\n"
                   "(warm-up, then the median of R runs; CUDA events on the GPU) and checks sampled rows\n"
                   "against the float64 reference. With --backward the gradients of a reduced copy of the\n"
                   "problem are checked in full (and with --deterministic a second backward must give\n"
                   "bitwise-equal gradients). TFLOP/s count 4*d*H per visible (query, key) pair forward\n"
                   "(masked pairs are not counted) and 2.5x that backward. Exit status 1 when a check fails\n"
                   "or the library returns an error.\n"
                   "With --kv-cache it runs forward_kvcache instead: seqlen-q queries per sequence (default 1)\n"
                   "against caches holding --cache-len random tokens, after appending --new-tokens random\n"
                   "k/v tokens; GB/s count the K and V bytes of the keys some query sees, read once. Sampled\n"
                   "rows are checked against the float64 reference on the gathered keys, and the caches\n"
                   "must hold the appended tokens and nothing else new.");
  register_options(&parser, &o);
  o.seed = harness::pick_seed();
  switch (parser.parse(argc, argv, first)) {
    case ArgParser::Outcome::kHelpShown: return kExitOk;
    case ArgParser::Outcome::kUsageError: return kExitUsage;
    case ArgParser::Outcome::kRun: break;
  }
  resolve_placement(parser, &o);
  if (o.heads % o.heads_kv != 0) {
    parser.usage_error("--heads " + std::to_string(o.heads) + " must be a multiple of --heads-kv " +
                       std::to_string(o.heads_kv));
    return kExitUsage;
  }
  if (const char* name = o.kv_cache ? first_given(parser, kAttentionOnlyOptions) : first_given(parser, kKvOnlyOptions)) {
    parser.usage_error(std::string("--") + name + (o.kv_cache ? " does not apply to --kv-cache" : " needs --kv-cache"));
    return kExitUsage;
  }
  if (o.backend == Backend::kCUDA && !gpu_present()) {
    std::fprintf(stderr, "flashattn run: backend cuda: %s\n",
                 cuda_built() ? "no CUDA device is present" : "this build of flashattn has no CUDA kernels");
    return kExitFailure;
  }

  if (o.kv_cache) return run_kvcache(parser, o);

  Target target;
  target.backend = o.backend;
  target.algorithm = o.algorithm;
  target.deterministic = o.deterministic;
  target.threads = o.threads;
  RunResult r;
  r.spec = make_spec(o);
  if (!o.json)
    std::printf("seed       %llu\nproblem    %s %s\n", (unsigned long long)o.seed, r.spec.describe().c_str(),
                to_string(r.spec.dtype));
  std::fflush(stdout);

  const char* step = "";
  const Status s = execute(o, target, &r, &step);
  if (!s.ok()) {
    std::fprintf(stderr, "flashattn run: %s: %s\n", step, s.to_string().c_str());
    return kExitFailure;
  }
  const bool pass = r.rows.pass() && (!o.backward || r.backward_pass());
  if (o.json) {
    report_json(o, r, pass);
  } else {
    report_text(o, r, pass);
  }
  return pass ? kExitOk : kExitFailure;
}

}  // namespace flashattn::cli
