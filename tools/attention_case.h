// One attention problem as the CLI builds it: its description, its host tensors (seeded random inputs,
// poisoned outputs), their device mirrors when it runs on CUDA, the argument structs for the library and
// for the float64 reference, and the comparisons of outputs against the reference.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device_buffers.h"
#include "flashattn/attention.h"
#include "reference/harness.h"
#include "reference/reference.h"

namespace flashattn::cli {

struct ProblemSpec {
  int64_t batch = 1;
  int64_t seqlen_q = 1, seqlen_k = 1;
  int64_t heads_q = 1, heads_kv = 1;
  int64_t head_dim = 64;
  // Varlen when non-empty: per-sequence lengths (batch = lens_q.size(); seqlen_q/k are ignored).
  std::vector<int32_t> lens_q, lens_k;
  int64_t pad = 0;  // > 0: every tensor's rows padded by this many elements (non-contiguous strides)
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  float scale = 0.0f;  // 0: 1/sqrt(head_dim)
  DType dtype = DType::kFloat32;

  bool varlen() const { return !lens_q.empty(); }
  // "b2 sq113 sk203 h8/1 d64 causal win32,0 cap30 varlen pad8"
  std::string describe() const;
};

// Where and how the library runs the problem.
struct Target {
  Backend backend = Backend::kCPU;  // never auto: the CLI places the tensors itself
  Algorithm algorithm = Algorithm::kAuto;
  bool deterministic = false;
  int threads = 0;
  int device = 0;  // CUDA device index
};

class ProblemBuffers {
 public:
  // Allocates host tensors (and nothing on the device yet); `backward` adds dout, dq, dk, dv.
  void create(const ProblemSpec& spec, bool backward, const Target& target);
  // Random q, k, v (and dout) in [-1, 1], rounded to the dtype; NaN poison in every output.
  void fill(std::mt19937_64& rng);
  // Copies every host tensor (inputs and poisoned outputs) to the device; no-op for the CPU target.
  Status upload();
  // Copies outputs back to the host; no-op for the CPU target.
  Status download_forward();
  Status download_backward();

  // Views of host memory, for the reference.
  AttentionArgs host_args() const;
  BackwardArgs host_backward_args() const;
  // Views where the target runs (device mirrors for CUDA).
  AttentionArgs run_args() const;
  BackwardArgs run_backward_args() const;

  const ProblemSpec& spec() const { return spec_; }
  bool on_gpu() const { return target_.backend == Backend::kCUDA; }

  harness::HostTensor q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k;

 private:
  AttentionArgs make_args(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                          const TensorView& lse, const TensorView& cu_q, const TensorView& cu_k) const;

  ProblemSpec spec_;
  Target target_;
  bool backward_ = false;
  DeviceMirror d_q_, d_k_, d_v_, d_out_, d_lse_, d_dout_, d_dq_, d_dk_, d_dv_, d_cu_q_, d_cu_k_;
};

// max |got - ref| of an LSE tensor: equal infinities (rows that see no key) count as 0, NaN as +inf.
double lse_max_diff(const harness::HostTensor& got, const std::vector<double>& ref);
double lse_max_diff(const std::vector<double>& got, const std::vector<double>& ref);

// Total NaN left in the outputs (forward: out, lse; backward: dq, dk, dv), i.e. elements never written.
int64_t unwritten_forward(const ProblemBuffers& b);
int64_t unwritten_backward(const ProblemBuffers& b);

// A stable 64-bit hash (FNV-1a) of a case name, so each case draws the same inputs from a given seed
// whichever cases run before it.
uint64_t name_hash(const std::string& name);

}  // namespace flashattn::cli
