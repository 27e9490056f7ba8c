// Host tensors, random fill, poisoning and the tolerance rule shared by the tests and the CLI.
#include "reference/harness.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/numeric.h"

namespace flashattn::harness {
namespace {

// Storage offset (in elements) of the element at logical row-major index `linear`.
int64_t offset_of(const TensorView& v, int64_t linear) {
  int64_t off = 0;
  for (int i = v.ndim - 1; i >= 0; --i) {
    int64_t n = v.shape[i] > 0 ? v.shape[i] : 1;
    off += (linear % n) * v.stride[i];
    linear /= n;
  }
  return off;
}

double load(DType dtype, const uint8_t* base, int64_t off) {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, base + off * 4, 4);
      return f;
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, base + off * 2, 2);
      return core::fp16_bits_to_float(h);
    }
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, base + off * 2, 2);
      return core::bf16_bits_to_float(h);
    }
    case DType::kInt32: {
      int32_t i;
      std::memcpy(&i, base + off * 4, 4);
      return i;
    }
    case DType::kFloat8E4M3: break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void store(DType dtype, uint8_t* base, int64_t off, double value) {
  switch (dtype) {
    case DType::kFloat32: {
      float f = float(value);
      std::memcpy(base + off * 4, &f, 4);
      return;
    }
    case DType::kFloat16: {
      uint16_t h = core::float_to_fp16_bits(float(value));
      std::memcpy(base + off * 2, &h, 2);
      return;
    }
    case DType::kBFloat16: {
      uint16_t h = core::float_to_bf16_bits(float(value));
      std::memcpy(base + off * 2, &h, 2);
      return;
    }
    case DType::kInt32: {
      int32_t i = int32_t(value);
      std::memcpy(base + off * 4, &i, 4);
      return;
    }
    case DType::kFloat8E4M3: return;
  }
}

}  // namespace

HostTensor HostTensor::make(DType dtype, std::vector<int64_t> shape, int64_t pad_last) {
  HostTensor t;
  TensorView& v = t.view;
  v.dtype = dtype;
  v.device = Device::kCPU;
  v.ndim = int(shape.size());
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[size_t(i)];
    v.stride[i] = stride;
    // Padding widens the rows of the second-to-last dimension, leaving the last one contiguous.
    stride *= shape[size_t(i)] + ((i == v.ndim - 1 && v.ndim >= 2) ? pad_last : 0);
  }
  // Keep storage non-empty and 16-byte aligned in size so device copies and vector loads stay in bounds.
  int64_t bytes = std::max<int64_t>(stride * dtype_size(dtype), 16);
  bytes = (bytes + 15) / 16 * 16;
  t.storage.assign(size_t(bytes), 0);
  v.data = t.storage.data();
  return t;
}

double HostTensor::get(int64_t linear) const {
  return load(view.dtype, static_cast<const uint8_t*>(view.data), offset_of(view, linear));
}

void HostTensor::set(int64_t linear, double value) {
  store(view.dtype, static_cast<uint8_t*>(view.data), offset_of(view, linear), value);
}

void fill_uniform(HostTensor* t, std::mt19937_64& rng, double scale) {
  std::uniform_real_distribution<double> dist(-scale, scale);
  const int64_t n = t->numel();
  for (int64_t i = 0; i < n; ++i) t->set(i, dist(rng));
}

void poison(HostTensor* t) {
  const int64_t bytes = int64_t(t->storage.size());
  uint8_t* p = t->storage.data();
  switch (t->view.dtype) {
    case DType::kFloat32: {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (int64_t i = 0; i + 4 <= bytes; i += 4) std::memcpy(p + i, &nan, 4);
      return;
    }
    case DType::kFloat16:
    case DType::kBFloat16: {
      const uint16_t nan = t->view.dtype == DType::kFloat16 ? 0x7e00 : 0x7fc0;
      for (int64_t i = 0; i + 2 <= bytes; i += 2) std::memcpy(p + i, &nan, 2);
      return;
    }
    default: std::memset(p, 0xff, size_t(bytes)); return;
  }
}

int64_t count_nan(const HostTensor& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += std::isnan(t.get(i)) ? 1 : 0;
  return n;
}

int64_t count_touched_padding(const HostTensor& t) {
  const int64_t elem = dtype_size(t.view.dtype);
  const int64_t slots = int64_t(t.storage.size()) / elem;
  std::vector<bool> logical(size_t(slots), false);
  for (int64_t linear = 0; linear < t.numel(); ++linear) logical[size_t(offset_of(t.view, linear))] = true;
  HostTensor fresh = t;
  poison(&fresh);
  int64_t touched = 0;
  for (int64_t s = 0; s < slots; ++s)
    if (!logical[size_t(s)] &&
        std::memcmp(&t.storage[size_t(s * elem)], &fresh.storage[size_t(s * elem)], size_t(elem)) != 0)
      ++touched;
  return touched;
}

double max_abs_diff(const HostTensor& got, const std::vector<double>& ref) {
  if (int64_t(ref.size()) != got.numel()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.get(i), r = ref[size_t(i)];
    if (std::isnan(g) || std::isnan(r)) return std::numeric_limits<double>::infinity();
    if (g == r) continue;  // equal infinities (lse = -inf) have no error
    m = std::max(m, std::fabs(g - r));
  }
  return m;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    if (a[i] == b[i]) continue;
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

double abs_floor(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 1e-5;
    case DType::kFloat16: return 5e-5;
    case DType::kBFloat16: return 2e-4;
    default: return 1e-3;
  }
}

std::string Verdict::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "err %.3g %s bound %.3g (naive %.3g)", error, pass ? "<=" : ">", bound,
                naive_error);
  return buf;
}

Verdict judge(double error, double naive_error, DType dtype, double magnitude) {
  Verdict v;
  v.error = error;
  v.naive_error = naive_error;
  v.bound = 2.0 * naive_error + abs_floor(dtype) * std::max(1.0, magnitude);
  v.pass = std::isfinite(error) && error <= v.bound;
  return v;
}

uint64_t pick_seed() {
  if (const char* env = std::getenv("FLASHATTN_SEED")) return std::strtoull(env, nullptr, 10);
  return uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count());
}

}  // namespace flashattn::harness
