// Runs the CPU kernels' bf16 products one chosen way within a scope (tests only).
#pragma once

#include "cpu/bf16_tiles.h"

namespace flashattn::testing {

class ScopedBf16Products {
 public:
  explicit ScopedBf16Products(detail::cpu::Bf16Products products) { detail::cpu::override_bf16_products(products); }
  ~ScopedBf16Products() { detail::cpu::clear_bf16_products_override(); }
  ScopedBf16Products(const ScopedBf16Products&) = delete;
  ScopedBf16Products& operator=(const ScopedBf16Products&) = delete;
};

// Whether `products` runs on this machine (kAmx needs the CPU's AMX; the others run anywhere).
inline bool bf16_products_runnable(detail::cpu::Bf16Products products) {
  return products != detail::cpu::Bf16Products::kAmx || detail::cpu::amx_bf16_supported();
}

}  // namespace flashattn::testing
