// Bulk 16-bit float conversions for tile loads.
#pragma once

#include <cstdint>

namespace flashattn::detail::cpu {

// dst[i] = the fp16 value src[i], exactly (every fp16 value is an fp32 value). Uses AVX-512 or F16C
// where the CPU has them, the portable conversion of core/numeric.h elsewhere: all give the same bits
// for every non-NaN input (the instructions quiet signaling NaNs).
void fp16_to_float_row(const uint16_t* src, int64_t n, float* dst);
// dst[i] = the bf16 value src[i], exactly (the top 16 bits of an fp32 value; NaNs keep their bits).
// AVX-512 or AVX2 where the CPU has them, the portable conversion elsewhere, with the same bits.
void bf16_to_float_row(const uint16_t* src, int64_t n, float* dst);

}  // namespace flashattn::detail::cpu
