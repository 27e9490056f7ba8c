// Moving rows between the caller's strided tensors (fp32/fp16/bf16) and contiguous fp32 tiles.
//
// Addressing follows detail::Problem: element (b, row, head, d) of a tensor lives at
//   ptr + b * batch_stride + (row_offset(b) + row) * row_stride + head * head_stride + d.
// The caller passes the absolute row (row_offset(b) + row); the last dimension is contiguous.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

#include "api/problem.h"
#include "core/numeric.h"
#include "cpu/convert.h"

namespace flashattn::detail::cpu {

inline int64_t element_offset(const Strided& t, int64_t b, int64_t abs_row, int64_t head) {
  return b * t.batch_stride + abs_row * t.row_stride + head * t.head_stride;
}

// Row abs_row of one head of a 16-bit tensor (bf16 operands read in place).
inline const uint16_t* row_u16(const Strided& t, int64_t b, int64_t abs_row, int64_t head) {
  return static_cast<const uint16_t*>(t.ptr) + element_offset(t, b, abs_row, head);
}

// dst[0, n) = fp32 values of the n elements at src (element offset `offset` of a tensor of `dtype`).
inline void load_row(const void* base, DType dtype, int64_t offset, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(dst, static_cast<const float*>(base) + offset, size_t(n) * sizeof(float));
      return;
    case DType::kFloat16:
      fp16_to_float_row(static_cast<const uint16_t*>(base) + offset, n, dst);
      return;
    case DType::kBFloat16:
      bf16_to_float_row(static_cast<const uint16_t*>(base) + offset, n, dst);
      return;
    default:
      // cpu_check rejects every other dtype before a kernel runs.
      return;
  }
}

// The n elements at `offset` of a tensor of `dtype` = src[i] * factor, rounded to nearest even.
inline void store_row(const float* src, int64_t n, float factor, void* base, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::kFloat32: {
      float* dst = static_cast<float*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * factor;
      return;
    }
    case DType::kFloat16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = core::float_to_fp16_bits(src[i] * factor);
      return;
    }
    case DType::kBFloat16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = core::float_to_bf16_bits(src[i] * factor);
      return;
    }
    default:
      return;
  }
}

// Rows [row_begin, row_begin + rows) of one head of one sequence into a contiguous [rows x d] tile.
inline void load_rows(const Problem& p, const Strided& t, int64_t b, int64_t row_offset, int64_t row_begin,
                      int64_t rows, int64_t head, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    load_row(t.ptr, p.dtype, element_offset(t, b, row_offset + row_begin + r, head), p.head_dim,
             dst + r * p.head_dim);
}

// A [rows x head_dim] fp32 operand for the tile products: row r at data + r * ld.
struct RowsView {
  const float* data = nullptr;
  int64_t ld = 0;
};

// Rows [row_begin, row_begin + rows) of one head: read in place when the tensor is fp32 (the tile
// product packs it anyway, so a copy would only add cache traffic), else converted into `scratch`.
inline RowsView view_rows(const Problem& p, const Strided& t, int64_t b, int64_t row_offset, int64_t row_begin,
                          int64_t rows, int64_t head, float* scratch) {
  if (p.dtype == DType::kFloat32)
    return {static_cast<const float*>(t.ptr) + element_offset(t, b, row_offset + row_begin, head), t.row_stride};
  load_rows(p, t, b, row_offset, row_begin, rows, head, scratch);
  return {scratch, p.head_dim};
}

// Asks the cache hierarchy, a few lines at a time, for rows that a later tile will read. The rows of
// one head are strided (the other heads sit in between) and usually come from L3 or memory; read only
// when the next tile is loaded, each costs a full miss latency. Spreading the prefetches over the
// current tile's work hides that latency without flooding the miss queues.
class RowPrefetcher {
 public:
  RowPrefetcher(const Problem& p, const Strided& t, int64_t b, int64_t abs_row_begin, int64_t rows, int64_t head)
      : base_(static_cast<const char*>(t.ptr) + element_offset(t, b, abs_row_begin, head) * dtype_size(p.dtype)),
        row_stride_bytes_(t.row_stride * dtype_size(p.dtype)),
        lines_per_row_((p.head_dim * dtype_size(p.dtype) + kLineBytes - 1) / kLineBytes),
        total_lines_(rows * lines_per_row_) {}

  int64_t remaining() const { return total_lines_ - next_; }

  // Issues up to `lines` more prefetches; returns how many it issued. Steps row and line along (a division
  // per line cost as much as the prefetches themselves).
  int64_t issue(int64_t lines) {
    const int64_t begin = next_;
    for (const int64_t end = std::min(total_lines_, next_ + lines); next_ < end; ++next_) {
      __builtin_prefetch(base_ + row_ * row_stride_bytes_ + line_ * kLineBytes, /*rw=*/0, /*locality=*/2);
      if (++line_ == lines_per_row_) {
        line_ = 0;
        ++row_;
      }
    }
    return next_ - begin;
  }

 private:
  static constexpr int64_t kLineBytes = 64;
  const char* base_ = nullptr;
  int64_t row_stride_bytes_ = 0;
  int64_t lines_per_row_ = 0;
  int64_t total_lines_ = 0;
  int64_t next_ = 0;  // lines issued so far: line_ of row row_ is next
  int64_t row_ = 0;
  int64_t line_ = 0;
};

// Several row ranges to prefetch, spread evenly over a number of steps of the current tile's work.
class PrefetchQueue {
 public:
  void clear() {
    ranges_.clear();
    per_step_ = 0;
  }
  void add(const RowPrefetcher& range) { ranges_.push_back(range); }
  void spread_over(int64_t steps) {
    int64_t total = 0;
    for (const RowPrefetcher& r : ranges_) total += r.remaining();
    per_step_ = steps > 0 ? (total + steps - 1) / steps : total;
  }
  void step() {
    int64_t budget = per_step_;
    for (size_t i = 0; i < ranges_.size() && budget > 0; ++i) budget -= ranges_[i].issue(budget);
  }

 private:
  std::vector<RowPrefetcher> ranges_;
  int64_t per_step_ = 0;
};

}  // namespace flashattn::detail::cpu
