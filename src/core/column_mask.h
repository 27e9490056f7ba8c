// A thread's per-element mask of one accumulator row as one bit per column, so that masking a block costs a
// select per element (nvcc turns the bit tests into R2P, which sets seven predicates at once) instead of
// two compares and a select.
//
// In the mma.sync m16n8k16 and the wgmma accumulator layouts a thread holds, of each of its rows, two
// adjacent columns of every eight: columns 8 j + e (j < kGroups, e in {0, 1}) counted from its first
// column. Bit 2 j + e stands for column 8 j + e.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/macros.h"

namespace flashattn::core {

template <int kGroups>
struct ColumnMask {
  static constexpr int kBits = 2 * kGroups;
  static_assert(kGroups > 0 && kBits <= 64, "one row of a thread's accumulator holds at most 64 columns");
  using Word = std::conditional_t<(kBits <= 32), uint32_t, uint64_t>;
  static constexpr Word kAll = kBits == 8 * int(sizeof(Word)) ? ~Word(0) : (Word(1) << kBits) - 1;

  // The bit of column 8 j + e.
  FA_HOST_DEVICE static constexpr int bit(int j, int e) { return 2 * j + e; }

  // How many of the thread's columns lie below column x (relative to its first column, any sign).
  FA_HOST_DEVICE static int count_below(int x) {
    const int r = x & 7;                           // with x >> 3 rounding toward -inf, r is in [0, 8)
    const int c = 2 * (x >> 3) + (r < 2 ? r : 2);  // 2 per whole group below x, and group x / 8's own
    return c < 0 ? 0 : (c > kBits ? kBits : c);
  }

  // The lowest n bits (0 <= n <= kBits).
  FA_HOST_DEVICE static Word first_bits(int n) { return n >= kBits ? kAll : (Word(1) << n) - 1; }

  // The bits of the columns in [lo, hi) (relative to the thread's first column); 0 when lo >= hi.
  FA_HOST_DEVICE static Word visible(int lo, int hi) {
    return first_bits(count_below(hi)) & ~first_bits(count_below(lo));
  }
};

}  // namespace flashattn::core
