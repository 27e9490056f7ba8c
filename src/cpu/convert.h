// Bulk 16-bit float conversions for tile loads.
#pragma once

#include <cstdint>

namespace flashattn::detail::cpu {

// dst[i] = the fp16 value src[i], exactly (every fp16 value is an fp32 value). Uses the F16C
// instructions where the CPU has them, the portable conversion of core/numeric.h elsewhere: both give
// the same bits for every non-NaN input (F16C quiets signaling NaNs).
void fp16_to_float_row(const uint16_t* src, int64_t n, float* dst);

}  // namespace flashattn::detail::cpu
