// Forward and backward checks of one problem against the float64 reference and the naive baseline.
#include "verify.h"

#include <cmath>
#include <limits>
#include <random>

namespace flashattn::cli {
namespace {

// Keeps what is known of the run (o->info) beside the reason.
CheckOutcome failure(CheckOutcome* o, std::string reason) {
  o->kind = CheckOutcome::Kind::kFail;
  o->reason = std::move(reason);
  return *o;
}

// Asks the library first: a configuration the backend does not build is a skip, not a failure. Any
// other refusal (invalid argument) means the case itself is wrong, which must not pass silently.
bool declined(const Status& s, CheckOutcome* o) {
  if (s.ok()) return false;
  o->kind = s.code() == StatusCode::kNotSupported ? CheckOutcome::Kind::kSkip : CheckOutcome::Kind::kFail;
  o->reason = s.code() == StatusCode::kNotSupported ? s.message() : s.to_string();
  return true;
}

// `magnitude` (the largest reference value) scales the absolute floor, as in the test suites.
void add(CheckOutcome* o, const char* name, double error, double naive_error, DType dtype, double magnitude) {
  TensorCheck t;
  t.name = name;
  t.verdict = harness::judge(error, naive_error, dtype, magnitude);
  o->tensors.push_back(t);
}

void conclude(CheckOutcome* o) {
  o->kind = CheckOutcome::Kind::kPass;
  for (const TensorCheck& t : o->tensors)
    if (!t.verdict.pass) o->kind = CheckOutcome::Kind::kFail;
}

}  // namespace

const TensorCheck* CheckOutcome::worst() const {
  const TensorCheck* w = nullptr;
  double worst_ratio = 0;
  for (const TensorCheck& t : tensors) {
    double ratio = t.verdict.bound > 0 ? t.verdict.error / t.verdict.bound : t.verdict.error;
    if (std::isnan(ratio)) ratio = std::numeric_limits<double>::infinity();
    if (w == nullptr || ratio > worst_ratio) {
      w = &t;
      worst_ratio = ratio;
    }
  }
  return w;
}

CheckOutcome verify_forward(const ProblemSpec& spec, const Target& target, uint64_t seed) {
  CheckOutcome o;
  ProblemBuffers b;
  b.create(spec, /*backward=*/false, target);
  std::mt19937_64 rng(seed);
  b.fill(rng);
  Status s = b.upload();
  if (!s.ok()) return failure(&o, "upload: " + s.to_string());
  if (declined(check_supported(b.run_args(), &o.info), &o)) return o;

  s = forward(b.run_args(), &o.info);
  if (!s.ok()) return failure(&o, "forward: " + s.to_string());
  s = b.download_forward();
  if (!s.ok()) return failure(&o, "download: " + s.to_string());
  if (const int64_t missing = unwritten_forward(b); missing > 0)
    return failure(&o, std::to_string(missing) + " output elements never written (still NaN poison)");

  reference::Result exact, naive;
  s = reference::forward(b.host_args(), reference::Precision::kFloat64, &exact);
  if (s.ok()) s = reference::forward(b.host_args(), reference::Precision::kNaive, &naive);
  if (!s.ok()) return failure(&o, "reference: " + s.to_string());

  add(&o, "out", harness::max_abs_diff(b.out, exact.out), harness::max_abs_diff(naive.out, exact.out), spec.dtype,
      harness::max_abs(exact.out));
  // The LSE is float32 in every dtype, but it is judged like the other outputs (as the test suites do):
  // its naive counterpart comes from scores rounded to the input dtype, and the floor is the input dtype's.
  add(&o, "lse", lse_max_diff(b.lse, exact.lse), lse_max_diff(naive.lse, exact.lse), spec.dtype,
      harness::max_abs(exact.lse));
  conclude(&o);
  return o;
}

CheckOutcome verify_backward(const ProblemSpec& spec, const Target& target, uint64_t seed) {
  CheckOutcome o;
  ProblemBuffers b;
  b.create(spec, /*backward=*/true, target);
  std::mt19937_64 rng(seed);
  b.fill(rng);
  Status s = b.upload();
  if (!s.ok()) return failure(&o, "upload: " + s.to_string());
  if (declined(check_supported(b.run_backward_args(), &o.info), &o)) return o;

  // The backward reads the forward's out and lse, produced here by the same backend and algorithm.
  RunInfo fwd_info;
  if (declined(check_supported(b.run_args(), &fwd_info), &o)) return o;
  s = forward(b.run_args(), &fwd_info);
  if (!s.ok()) return failure(&o, "forward (for backward): " + s.to_string());
  s = backward(b.run_backward_args(), &o.info);
  if (!s.ok()) return failure(&o, "backward: " + s.to_string());
  s = b.download_backward();
  if (!s.ok()) return failure(&o, "download: " + s.to_string());
  if (const int64_t missing = unwritten_backward(b); missing > 0)
    return failure(&o, std::to_string(missing) + " gradient elements never written (still NaN poison)");

  reference::Result exact, naive;
  s = reference::backward(b.host_backward_args(), reference::Precision::kFloat64, &exact);
  if (s.ok()) s = reference::backward(b.host_backward_args(), reference::Precision::kNaive, &naive);
  if (!s.ok()) return failure(&o, "reference: " + s.to_string());

  add(&o, "dq", harness::max_abs_diff(b.dq, exact.dq), harness::max_abs_diff(naive.dq, exact.dq), spec.dtype,
      harness::max_abs(exact.dq));
  add(&o, "dk", harness::max_abs_diff(b.dk, exact.dk), harness::max_abs_diff(naive.dk, exact.dk), spec.dtype,
      harness::max_abs(exact.dk));
  add(&o, "dv", harness::max_abs_diff(b.dv, exact.dv), harness::max_abs_diff(naive.dv, exact.dv), spec.dtype,
      harness::max_abs(exact.dv));
  conclude(&o);
  return o;
}

}  // namespace flashattn::cli
