// Full checks of one problem against the float64 reference with the tolerance rule of the test suites:
// every output tensor's max error must be at most 2x the error of the same-precision naive computation
// plus a floor (harness::judge), every output element must be written, and NaN never passes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention_case.h"
#include "reference/harness.h"

namespace flashattn::cli {

struct TensorCheck {
  std::string name;  // "out", "lse", "dq", "dk", "dv"
  harness::Verdict verdict;
};

struct CheckOutcome {
  enum class Kind { kPass, kFail, kSkip };
  Kind kind = Kind::kFail;
  std::string reason;  // kSkip: why the backend declines; kFail: the error, when not a tolerance failure
  RunInfo info;        // what ran (or would have run)
  std::vector<TensorCheck> tensors;

  // The tensor closest to (or furthest over) its bound; nullptr when none was compared.
  const TensorCheck* worst() const;
};

// Runs the forward of `spec` on `target` with inputs drawn from `seed`, then compares out and lse.
CheckOutcome verify_forward(const ProblemSpec& spec, const Target& target, uint64_t seed);
// Runs forward then backward on `target` and compares dq, dk and dv.
CheckOutcome verify_backward(const ProblemSpec& spec, const Target& target, uint64_t seed);

}  // namespace flashattn::cli
