// Packed (varlen) rows after the last sequence of cu_seqlens_q belong to no sequence. The forward still
// writes every element of its outputs there, as for a row that sees no key: out = 0 and lse = -inf. The
// tile kernels (fa2, fa3) walk only the rows of sequences, so the launch writes these rows apart.
#pragma once

#include "api/problem.h"
#include "cuda/launch.h"

namespace flashattn::cuda {

// out = 0 and lse = -inf (where lse is requested) on the rows [cu_seqlens_q[batch], total rows) of a varlen
// problem, on ctx.stream; nothing to do (and no launch) otherwise. fp16 and bf16 outputs.
Status write_unowned_forward_rows(const detail::Problem& p, const Context& ctx);

}  // namespace flashattn::cuda
