// One worker's fp32 scratch: several buffers carved from a single 64-byte aligned allocation, so tile
// rows start on cache-line boundaries and a worker allocates once per call, not once per tile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <new>
#include <vector>

namespace flashattn::detail::cpu {

class Scratch {
 public:
  static constexpr size_t kAlignBytes = 64;
  static constexpr int64_t kAlignFloats = int64_t(kAlignBytes / sizeof(float));

  // Buffers of the given float counts; throws std::bad_alloc (the worker pool turns it into a Status).
  explicit Scratch(std::initializer_list<int64_t> floats) {
    int64_t total = 0;
    for (int64_t n : floats) {
      offsets_.push_back(total);
      total += (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    }
    const size_t bytes = size_t(total > 0 ? total : 1) * sizeof(float);
    block_.reset(static_cast<float*>(::operator new(bytes, std::align_val_t(kAlignBytes))));
  }

  float* operator[](size_t i) const { return block_.get() + offsets_[i]; }

  // 16-bit buffers (bf16 operands) ride in the same block: size them with halves(), read them with u16().
  static int64_t halves(int64_t elements) { return (elements + 1) / 2; }
  uint16_t* u16(size_t i) const { return reinterpret_cast<uint16_t*>((*this)[i]); }

 private:
  struct Free {
    void operator()(float* p) const { ::operator delete(p, std::align_val_t(kAlignBytes)); }
  };
  std::unique_ptr<float, Free> block_;
  std::vector<int64_t> offsets_;
};

}  // namespace flashattn::detail::cpu
