// `flashattn check`: the correctness sweep over edge shapes on every available backend and algorithm,
// forward and backward, judged with the test suites' tolerance rule (see verify.h).
//
// Cases come in three tiers: --quick (a few seconds: every feature once), the default (CI runs it as a
// CTest case on a 2-core machine, so its CPU part stays well under two minutes) and --full (the large
// shapes). Inputs of a case depend only on the seed and the case's own text, so a failing line can be
// rerun alone with --seed and --filter.
#include <cstdio>
#include <string>
#include <vector>

#include "attention_case.h"
#include "cli_args.h"
#include "cli_common.h"
#include "commands.h"
#include "json_writer.h"
#include "verify.h"

namespace flashattn::cli {
namespace {

enum class Tier { kQuick = 0, kDefault = 1, kFull = 2 };

struct CaseDef {
  Tier tier;
  ProblemSpec spec;
  // The dtypes to check, in order of preference. A backend that offers none of them checks the case in
  // the first dtype it does offer, so fp32-only cases still cover the 16-bit-only CUDA kernels.
  std::vector<DType> dtypes;
};

const std::vector<DType> kAllTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
const std::vector<DType> kFp32 = {DType::kFloat32};
const std::vector<DType> kFp16 = {DType::kFloat16};
const std::vector<DType> kBf16 = {DType::kBFloat16};

// Fluent construction of a ProblemSpec, so the case table reads one case a line.
struct Spec {
  ProblemSpec s;
  static Spec padded(int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hk, int64_t d) {
    Spec x;
    x.s.batch = batch;
    x.s.seqlen_q = sq;
    x.s.seqlen_k = sk;
    x.s.heads_q = hq;
    x.s.heads_kv = hk;
    x.s.head_dim = d;
    return x;
  }
  static Spec varlen(std::vector<int32_t> lens_q, std::vector<int32_t> lens_k, int64_t hq, int64_t hk, int64_t d) {
    Spec x = padded(int64_t(lens_q.size()), 0, 0, hq, hk, d);
    x.s.lens_q = std::move(lens_q);
    x.s.lens_k = std::move(lens_k);
    return x;
  }
  Spec causal() const {
    Spec x = *this;
    x.s.causal = true;
    return x;
  }
  Spec window(int64_t left, int64_t right) const {
    Spec x = *this;
    x.s.window_left = left;
    x.s.window_right = right;
    return x;
  }
  Spec softcap(float c) const {
    Spec x = *this;
    x.s.softcap = c;
    return x;
  }
  Spec scale(float v) const {
    Spec x = *this;
    x.s.scale = v;
    return x;
  }
  Spec pad(int64_t p) const {
    Spec x = *this;
    x.s.pad = p;
    return x;
  }
};

std::vector<CaseDef> case_table() {
  using S = Spec;
  const Tier Q = Tier::kQuick, D = Tier::kDefault, F = Tier::kFull;
  // padded(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim); varlen(lens_q, lens_k, heads_q, heads_kv,
  // head_dim). The dtype list is a preference (see CaseDef).
  std::vector<CaseDef> cases = {
      // --quick: every feature once, small.
      {Q, S::padded(2, 17, 17, 4, 4, 64).s, kAllTypes},
      {Q, S::padded(1, 113, 203, 8, 1, 64).causal().s, kBf16},  // GQA 8:1, bottom-right causal
      {Q, S::padded(1, 1, 239, 4, 2, 128).s, kFp32},
      {Q, S::padded(1, 799, 3, 2, 1, 32).causal().s, kFp16},  // seqlen_q > seqlen_k: fully masked rows
      // Varlen with an empty sequence, and one whose queries see no key at all.
      {Q, S::varlen({17, 0, 64, 5}, {40, 0, 31, 0}, 4, 2, 64).causal().s, kFp32},
      {Q, S::padded(2, 113, 113, 4, 2, 64).pad(8).s, kBf16},  // non-contiguous strides
      {Q, S::padded(1, 257, 257, 2, 2, 64).window(32, 8).softcap(20.0f).s, kFp32},
      // Default: the edge lengths, head dims, GQA/MQA, masks, varlen and strides.
      {D, S::padded(1, 1, 1, 2, 1, 64).s, kAllTypes},
      {D, S::padded(2, 17, 17, 4, 1, 64).causal().s, kFp16},
      {D, S::padded(1, 113, 113, 16, 2, 64).causal().s, kBf16},  // GQA 8:1 with two KV heads
      {D, S::padded(1, 113, 113, 8, 1, 64).s, kFp16},            // MQA
      {D, S::padded(1, 1007, 1007, 2, 1, 64).s, kFp32},
      {D, S::padded(1, 1007, 1007, 2, 1, 64).causal().s, kBf16},
      {D, S::padded(1, 1023, 1024, 1, 1, 64).causal().s, kFp32},
      {D, S::padded(1, 1024, 1023, 1, 1, 64).causal().s, kBf16},
      {D, S::padded(1, 1, 239, 8, 1, 64).causal().s, kFp16},
      {D, S::padded(2, 799, 3, 2, 2, 64).s, kFp32},
      {D, S::padded(1, 113, 203, 2, 1, 32).s, kBf16},
      {D, S::padded(1, 113, 203, 2, 1, 96).s, kBf16},
      {D, S::padded(1, 113, 203, 2, 1, 128).s, kFp16},
      {D, S::padded(1, 113, 203, 2, 1, 192).s, kBf16},
      {D, S::padded(1, 113, 203, 2, 1, 256).causal().s, kFp32},
      {D, S::padded(1, 300, 300, 2, 1, 64).window(64, -1).s, kFp16},  // left window only
      {D, S::padded(1, 100, 300, 2, 1, 64).window(16, 16).s, kBf16},  // sliding window, sq < sk
      {D, S::padded(1, 200, 200, 2, 1, 128).causal().softcap(30.0f).s, kBf16},
      {D, S::varlen({113, 0, 256, 1}, {203, 17, 256, 64}, 4, 1, 64).causal().s, kBf16},
      {D, S::varlen({31, 64, 0}, {1, 80, 0}, 2, 2, 128).pad(8).s, kFp32},
      {D, S::padded(2, 64, 200, 8, 2, 64).causal().pad(16).s, kFp32},
      {D, S::padded(1, 64, 64, 2, 2, 64).scale(0.5f).s, kFp16},
      // --full: large shapes.
      {F, S::padded(2, 2048, 2048, 4, 1, 128).causal().s, kBf16},
      {F, S::padded(1, 1007, 1007, 4, 4, 256).s, kFp32},
      {F, S::padded(1, 4096, 4096, 2, 1, 64).causal().s, kFp16},
      {F, S::padded(1, 2048, 4096, 4, 2, 128).window(256, 0).softcap(30.0f).s, kBf16},
      {F, S::varlen({1000, 7, 0, 2048, 513}, {1000, 900, 11, 2048, 1}, 4, 2, 64).causal().s, kBf16},
  };
  return cases;
}

struct CheckOptions {
  std::string backend_name = "all";
  std::string algo_name = "all";
  bool quick = false, full = false, json = false;
  int threads = 0;
  std::string filter;
  uint64_t seed = 0;
};

struct TargetEntry {
  Target target;
  std::vector<DType> dtypes;  // what the backend's capabilities list (empty: unknown, try the case's)
  bool backward = true;
};

// The dtypes of `c` checked on a backend offering `offered`.
std::vector<DType> dtypes_for(const CaseDef& c, const std::vector<DType>& offered) {
  if (offered.empty()) return c.dtypes;
  std::vector<DType> chosen;
  for (DType d : c.dtypes)
    for (DType o : offered)
      if (d == o) chosen.push_back(d);
  if (chosen.empty()) chosen.push_back(offered.front());
  return chosen;
}

struct Tally {
  int passed = 0, failed = 0, skipped = 0;
};

const char* kind_text(CheckOutcome::Kind k) {
  switch (k) {
    case CheckOutcome::Kind::kPass: return "PASS";
    case CheckOutcome::Kind::kFail: return "FAIL";
    case CheckOutcome::Kind::kSkip: return "skip";
  }
  return "?";
}

}  // namespace

int cmd_check(int argc, char** argv, int first) {
  CheckOptions o;
  ArgParser parser("check",
                   "flashattn check [--backend all|cpu|cuda] [--algo all|standard|fa1|fa2|fa3] [--quick|--full]\n"
                   "                       [--filter TEXT] [--seed S] [--threads T] [--json]",
                   "Checks forward and backward on edge shapes (odd lengths, seqlen_q != seqlen_k, GQA/MQA,\n"
                   "causal, window, softcap, varlen with empty sequences, non-contiguous strides, every head\n"
                   "dim and dtype a backend offers) on the cpu backend and on every CUDA algorithm that is\n"
                   "available, against the float64 reference: a case passes when its max error is at most\n"
                   "2x that of the same-precision naive computation plus a floor, and every output element\n"
                   "was written. Configurations a backend does not build are reported as skipped. Prints\n"
                   "one line per case and 'check: N passed, M failed, K skipped'; exit status 1 on any\n"
                   "failure, or when nothing ran.");
  parser.add_custom("backend", "NAME", "all, cpu or cuda", "all", [&o](const std::string& t, std::string* e) {
    if (t == "all" || t == "cpu" || t == "cuda") {
      o.backend_name = t;
      return true;
    }
    *e = "expects all, cpu or cuda, got '" + t + "'";
    return false;
  });
  parser.add_custom("algo", "NAME", "all, standard, fa1, fa2 or fa3", "all",
                    [&o](const std::string& t, std::string* e) {
                      Algorithm a;
                      if (t == "all" || (parse_algorithm(t, &a) && a != Algorithm::kAuto)) {
                        o.algo_name = t;
                        return true;
                      }
                      *e = "expects all, standard, fa1, fa2 or fa3, got '" + t + "'";
                      return false;
                    });
  parser.add_flag("quick", &o.quick, "only the quick cases (every feature once, seconds)");
  parser.add_flag("full", &o.full, "add the large shapes (minutes on a CPU)");
  parser.add_text("filter", &o.filter, "TEXT", "only cases whose line contains TEXT (e.g. 'cpu fa2 bwd')");
  parser.add_custom("seed", "S", "seed of the random inputs", "$FLASHATTN_SEED, else the clock",
                    [&o](const std::string& t, std::string* e) { return parse_seed(t, &o.seed, e); });
  parser.add_int("threads", &o.threads, "T", "cpu worker threads (0 = all hardware threads)", 0, kMaxThreads);
  parser.add_flag("json", &o.json, "print the results as JSON on stdout (case lines go to stderr)");
  o.seed = harness::pick_seed();
  switch (parser.parse(argc, argv, first)) {
    case ArgParser::Outcome::kHelpShown: return kExitOk;
    case ArgParser::Outcome::kUsageError: return kExitUsage;
    case ArgParser::Outcome::kRun: break;
  }
  if (o.quick && o.full) {
    parser.usage_error("--quick and --full exclude each other");
    return kExitUsage;
  }
  const Tier tier = o.quick ? Tier::kQuick : o.full ? Tier::kFull : Tier::kDefault;
  FILE* lines = o.json ? stderr : stdout;
  std::fprintf(lines, "check: seed %llu (rerun with --seed %llu)\n", (unsigned long long)o.seed,
               (unsigned long long)o.seed);

  // The targets: cpu always (unless filtered out), each available CUDA algorithm.
  std::vector<TargetEntry> targets;
  for (const Capabilities& c : capabilities()) {
    const bool is_cuda = c.backend == Backend::kCUDA;
    if (o.backend_name != "all" && o.backend_name != (is_cuda ? "cuda" : "cpu")) continue;
    if (o.algo_name != "all" && o.algo_name != to_string(c.algorithm) && is_cuda) continue;
    if (is_cuda && !c.available) {
      const std::string algo = c.algorithm == Algorithm::kAuto ? "" : std::string(" ") + to_string(c.algorithm);
      std::fprintf(lines, "note: cuda%s not checked: %s\n", algo.c_str(), c.note.c_str());
      continue;
    }
    TargetEntry e;
    e.target.backend = is_cuda ? Backend::kCUDA : Backend::kCPU;
    // The cpu backend has one algorithm; its capabilities name it (auto while it names none).
    e.target.algorithm = c.algorithm;
    if (!is_cuda && o.algo_name != "all") parse_algorithm(o.algo_name, &e.target.algorithm);
    e.target.threads = o.threads;
    e.dtypes = c.dtypes;
    e.backward = c.backward || !c.available;
    targets.push_back(e);
  }

  Tally tally;
  JsonWriter j;
  j.begin_object().field("seed", o.seed).key("cases").begin_array();
  for (const TargetEntry& t : targets) {
    for (const CaseDef& c : case_table()) {
      if (int(c.tier) > int(tier)) continue;
      for (DType dtype : dtypes_for(c, t.dtypes)) {
        for (const bool bwd : {false, true}) {
          ProblemSpec spec = c.spec;
          spec.dtype = dtype;
          const std::string what = std::string(bwd ? "bwd " : "fwd ") + to_string(dtype) + " " + spec.describe();
          const std::string requested = std::string(to_string(t.target.backend)) + " " + to_string(t.target.algorithm);
          if (!o.filter.empty() && (requested + " " + what).find(o.filter) == std::string::npos) continue;
          const uint64_t seed = o.seed ^ name_hash(what);
          CheckOutcome r;
          if (bwd && !t.backward) {
            r.kind = CheckOutcome::Kind::kSkip;
            r.reason = "backend has no backward";
          } else {
            r = bwd ? verify_backward(spec, t.target, seed) : verify_forward(spec, t.target, seed);
          }
          const bool ran = r.kind != CheckOutcome::Kind::kSkip;
          const std::string who =
              ran ? std::string(to_string(t.target.backend)) + " " + to_string(r.info.algorithm) : requested;
          std::string tail;
          const TensorCheck* w = r.worst();
          if (r.kind == CheckOutcome::Kind::kSkip) {
            tail = "  (" + r.reason + ")";
          } else if (!r.reason.empty()) {
            tail = "  " + r.reason;
          } else if (w != nullptr) {
            tail = "  err " + sci(w->verdict.error) + " <= " + sci(w->verdict.bound) + " (" + w->name + ")";
          }
          std::fprintf(lines, "%s %s %s%s\n", kind_text(r.kind), who.c_str(), what.c_str(), tail.c_str());
          std::fflush(lines);
          if (r.kind == CheckOutcome::Kind::kPass) ++tally.passed;
          if (r.kind == CheckOutcome::Kind::kFail) ++tally.failed;
          if (r.kind == CheckOutcome::Kind::kSkip) ++tally.skipped;

          j.begin_object().field("status", r.kind == CheckOutcome::Kind::kPass   ? "pass"
                                           : r.kind == CheckOutcome::Kind::kFail ? "fail"
                                                                                 : "skip");
          j.field("backend", to_string(t.target.backend))
              .field("algorithm", to_string(ran ? r.info.algorithm : t.target.algorithm));
          j.field("direction", bwd ? "bwd" : "fwd").field("dtype", to_string(dtype)).field("problem", spec.describe());
          j.field("seed", seed);
          if (ran) j.field("kernel", r.info.kernel);
          if (!r.reason.empty()) j.field("reason", r.reason);
          j.key("tensors").begin_object();
          for (const TensorCheck& tc : r.tensors)
            j.key(tc.name)
                .begin_object()
                .field("error", tc.verdict.error)
                .field("bound", tc.verdict.bound)
                .field("naive_error", tc.verdict.naive_error)
                .field("pass", tc.verdict.pass)
                .end_object();
          j.end_object().end_object();
        }
      }
    }
  }
  j.end_array().field("passed", tally.passed).field("failed", tally.failed).field("skipped", tally.skipped);
  j.end_object();
  if (o.json) std::printf("%s\n", j.str().c_str());
  std::fprintf(lines, "check: %d passed, %d failed, %d skipped\n", tally.passed, tally.failed, tally.skipped);
  if (tally.passed + tally.failed == 0) {
    std::fprintf(stderr, "flashattn check: no case ran (every case skipped or filtered out)\n");
    return kExitFailure;
  }
  return tally.failed == 0 ? kExitOk : kExitFailure;
}

}  // namespace flashattn::cli
