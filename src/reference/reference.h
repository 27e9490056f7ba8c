// Naive attention that materializes S and P, for tests and spot checks only.
//
// It shares no masking code with src/core on purpose: the visibility rule is written out again here,
// straight from the definition in include/flashattn/attention.h, so a bug in core/mask.h cannot hide itself.
//
// Inputs are read from the host tensors of an AttentionArgs (any float dtype, any strides); results are
// returned in contiguous double arrays with the logical shape of the corresponding tensor:
//   out, dq like q ([batch, seqlen_q, heads_q, d] or varlen [total_q, heads_q, d]); dk, dv like k;
//   lse like the API's lse ([batch, heads_q, seqlen_q] or varlen [heads_q, total_q]).
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/attention.h"

namespace flashattn::reference {

enum class Precision {
  kFloat64,  // the oracle: every step in double
  kNaive,    // a framework's naive attention in the inputs' precision: S, P and O rounded to the input dtype
             // (fp32 accumulation inside each product), the baseline of the tolerance rule
};

struct Result {
  std::vector<double> out, lse;
  std::vector<double> dq, dk, dv;
};

// Forward on every row. args.out and args.lse are not read or written.
Status forward(const AttentionArgs& args, Precision precision, Result* result);

// Backward (recomputes the forward itself; args.fwd.out/lse are not read). Fills out, lse, dq, dk, dv.
Status backward(const BackwardArgs& args, Precision precision, Result* result);

// One query row of one head, in float64: out[d] and lse. For spot checks of large problems.
struct RowId {
  int64_t batch = 0, head = 0, row = 0;
};
Status forward_row(const AttentionArgs& args, RowId id, std::vector<double>* out, double* lse);

}  // namespace flashattn::reference
