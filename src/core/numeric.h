// Numeric constants and 16-bit float conversions shared by every backend (host and device).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "core/macros.h"

namespace flashattn::core {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x * kLog2e)
constexpr float kLn2 = 0.6931471805599453f;    // ln(2): log(x) = log2(x) * kLn2
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

FA_HOST_DEVICE float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

FA_HOST_DEVICE uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

// bfloat16 is the top half of a float32; rounding is to nearest even, NaN stays NaN.
FA_HOST_DEVICE float bf16_bits_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

FA_HOST_DEVICE uint16_t float_to_bf16_bits(float f) {
  uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

// IEEE binary16 <-> float32, round to nearest even, with subnormals, infinities and NaN.
FA_HOST_DEVICE float fp16_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // Subnormal: value = mant * 2^-24.
    float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

FA_HOST_DEVICE uint16_t float_to_fp16_bits(float f) {
  uint32_t bits = float_to_bits(f);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);           // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);          // overflows to inf (>= 65520)
  if (abs < 0x38800000u) {                                          // below the smallest normal 2^-14
    // Subnormal or zero: round abs * 2^24 to an integer, nearest even.
    float v = bits_to_float(abs) * 16777216.0f;
    uint32_t q = uint32_t(v);
    float frac = v - float(q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
  abs += rounding;
  return uint16_t(sign | (((abs >> 23) - 112u) << 10) | ((abs >> 13) & 0x3ffu));
}

}  // namespace flashattn::core
