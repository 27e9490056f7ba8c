// Host-side test and check support shared by the test suites and the CLI: owned host tensors, seeded
// random fill, output poisoning, and the tolerance rule of docs/testing.md.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flashattn/attention.h"

namespace flashattn::harness {

// An owned, contiguous (or padded: see make) host tensor.
struct HostTensor {
  std::vector<uint8_t> storage;
  TensorView view;

  // Contiguous tensor of `shape`. With `pad_last` > 0 the rows are padded (last-dim stride unchanged,
  // the stride of dim ndim-2 grows by pad_last elements), which makes the tensor non-contiguous.
  static HostTensor make(DType dtype, std::vector<int64_t> shape, int64_t pad_last = 0);

  HostTensor() = default;
  // view.data points into storage: copies re-point it, moves keep the buffer (and the pointer) valid.
  HostTensor(const HostTensor& o) : storage(o.storage), view(o.view) { view.data = storage.data(); }
  HostTensor& operator=(const HostTensor& o) {
    storage = o.storage;
    view = o.view;
    view.data = storage.data();
    return *this;
  }
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  int64_t numel() const { return view.numel(); }
  double get(int64_t linear) const;   // element at the logical row-major index (honours strides)
  void set(int64_t linear, double value);
};

// Fills with values drawn uniformly from [-scale, scale], rounded to the tensor's dtype.
void fill_uniform(HostTensor* t, std::mt19937_64& rng, double scale = 1.0);
// Writes NaN (float types) or a sentinel (int32) into every element, including padding.
void poison(HostTensor* t);
// Number of elements that are still NaN (i.e. were never written).
int64_t count_nan(const HostTensor& t);
// Storage elements outside the logical elements (row padding, the gaps of a permuted view) that no
// longer hold the pattern `poison` wrote: a kernel wrote where it must not. Meaningful after `poison`.
int64_t count_touched_padding(const HostTensor& t);

// max |a - b| over all elements, with NaN in either giving +inf.
double max_abs_diff(const HostTensor& got, const std::vector<double>& ref);
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
// max |a| over the finite elements (the magnitude that scales the absolute floor).
double max_abs(const std::vector<double>& a);

// The tolerance rule: a kernel passes when its max error against the float64 oracle is at most
// 2 * (max error of the same-precision naive computation) + floor, where the floor is abs_floor(dtype)
// times max(1, magnitude of the reference values). NaN never passes.
double abs_floor(DType dtype);
struct Verdict {
  bool pass = false;
  double error = 0, naive_error = 0, bound = 0;
  std::string describe() const;  // "err 1.2e-3 <= bound 3.0e-3 (naive 1.1e-3)"
};
Verdict judge(double error, double naive_error, DType dtype, double magnitude = 1.0);

// A seed taken from FLASHATTN_SEED when set, else from the clock; printed by the callers.
uint64_t pick_seed();

}  // namespace flashattn::harness
