// Packed (varlen) rows after the last sequence belong to no sequence. Every output still gets all of its
// elements written there, as for a row that sees no key: the forward writes out = 0 and lse = -inf on the
// query rows after cu_seqlens_q[batch], the backward zero dq there and zero dk and dv on the key rows after
// cu_seqlens_k[batch]. The kernels walk the rows of sequences only, so the launches write these rows apart.
// A forward without any key row is written here whole (fa3, whose tensor maps need rows, takes no kernel).
#pragma once

#include <cstdint>

#include "api/problem.h"
#include "cuda/launch.h"

namespace flashattn::cuda {

// Zeros the first head_dim elements of rows [row_begin, row_end) x heads of a 16-bit tensor, in each of its
// first `batches` batches (one for a packed tensor), and, where lse is given, sets lse = -inf on those rows of
// every head; on ctx.stream; no launch for an empty range.
Status zero_rows(const detail::Strided& t, int64_t row_begin, int64_t row_end, int64_t heads, int64_t head_dim,
                 const Context& ctx, const detail::Strided* lse = nullptr, int64_t batches = 1);

// out = 0 and lse = -inf (where lse is requested) on the query rows after the last sequence of a varlen
// forward; nothing otherwise. fp16 and bf16 outputs.
Status write_unowned_forward_rows(const detail::Problem& p, const Context& ctx);

// out = 0 and lse = -inf (where lse is requested) on every query row: the whole result of a forward whose
// problem has no key at all (seqlen_k 0, or a varlen batch whose sequences are all without keys).
Status write_forward_without_keys(const detail::Problem& p, const Context& ctx);

// Zero dq on the query rows after the last sequence, dk and dv on the key rows after it (varlen backward).
Status write_unowned_backward_rows(const detail::Problem& p, const Context& ctx);

}  // namespace flashattn::cuda
