// The validated, normalized form of one attention call that every backend receives.
//
// Addressing is uniform for padded and varlen layouts: element (b, row, head, d) of q lives at
//   q.ptr + (b * q.batch_stride + (row_offset_q(b) + row) * q.row_stride + head * q.head_stride + d)
// where batch_stride is 0 and row_offset_q(b) = cu_seqlens_q[b] for varlen, and row_offset_q(b) = 0 otherwise.
// LSE (b, head, row) lives at lse.ptr + b * lse.batch_stride + head * lse.head_stride +
// (row_offset_q(b) + row) * lse.row_stride.
#pragma once

#include <cstdint>
#include <vector>

#include "core/mask.h"
#include "flashattn/attention.h"

namespace flashattn::detail {

struct Strided {
  void* ptr = nullptr;
  int64_t batch_stride = 0;  // elements
  int64_t row_stride = 0;
  int64_t head_stride = 0;
  bool present() const { return ptr != nullptr; }
};

struct Problem {
  DType dtype = DType::kFloat32;
  Device device = Device::kCPU;
  int device_index = 0;
  bool backward = false;

  int64_t batch = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t head_dim = 0;
  int64_t seqlen_q = 0;  // padded: the length; varlen: the max over the batch
  int64_t seqlen_k = 0;
  bool varlen = false;
  int64_t total_q = 0;  // varlen: rows of the packed tensors; padded: batch * seqlen
  int64_t total_k = 0;

  // Varlen prefix sums: `device_cu_*` point where the caller's tensors live (read by kernels);
  // `cu_*` is the validated host copy (read by host code and CPU kernels).
  const int32_t* device_cu_q = nullptr;
  const int32_t* device_cu_k = nullptr;
  std::vector<int32_t> cu_q, cu_k;

  Strided q, k, v, out, lse;
  Strided dout, dq, dk, dv;  // backward only

  float scale = 0.0f;  // resolved: never 0
  float softcap = 0.0f;
  bool causal = false;
  int64_t window_left = -1;
  int64_t window_right = -1;

  Backend backend = Backend::kAuto;      // resolved by dispatch
  Algorithm algorithm = Algorithm::kAuto;  // as requested; backends resolve auto
  bool deterministic = false;
  int num_threads = 0;
  void* stream = nullptr;

  int64_t group() const { return heads_q / heads_kv; }  // query heads per KV head
  int64_t q_row_offset(int64_t b) const { return varlen ? cu_q[size_t(b)] : 0; }
  int64_t k_row_offset(int64_t b) const { return varlen ? cu_k[size_t(b)] : 0; }
  int64_t len_q(int64_t b) const { return varlen ? cu_q[size_t(b) + 1] - cu_q[size_t(b)] : seqlen_q; }
  int64_t len_k(int64_t b) const { return varlen ? cu_k[size_t(b) + 1] - cu_k[size_t(b)] : seqlen_k; }
  core::MaskSpec mask(int64_t b) const {
    return core::MaskSpec::make(len_q(b), len_k(b), causal, window_left, window_right);
  }
  // Forward FLOPs as in the FlashAttention papers, counting only visible (row, key) pairs.
  double forward_flops() const;
};

// Checks every rule of the API that does not depend on the backend and fills `problem`.
// Nothing is written to any output tensor.
Status make_problem(const AttentionArgs& args, Problem* problem);
Status make_problem(const BackwardArgs& args, Problem* problem);

}  // namespace flashattn::detail
