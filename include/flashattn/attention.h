// Exact attention: forward, backward, and the query of what a backend supports.
//
// Layout (as the FlashAttention API):
//   q    [batch, seqlen_q, heads_q,  head_dim]      or varlen [total_q, heads_q,  head_dim]
//   k, v [batch, seqlen_k, heads_kv, head_dim]      or varlen [total_k, heads_kv, head_dim]
//   out  like q;  lse float32 [batch, heads_q, seqlen_q] or varlen [heads_q, total_q], natural log.
// The last dimension must be contiguous; other strides are free (in elements).
// GQA/MQA: heads_q must be a multiple of heads_kv; query head h reads KV head h / (heads_q / heads_kv).
//
// Masking. With seqlen_q != seqlen_k the mask is aligned bottom-right: query row i sits at key position
// i + (seqlen_k - seqlen_q), as in FlashAttention 2.1+. Key j is visible to query i when
//   j <= i + (seqlen_k - seqlen_q) + window_right   (window_right < 0: unbounded; causal sets it to 0)
//   j >= i + (seqlen_k - seqlen_q) - window_left    (window_left  < 0: unbounded)
// A query row that sees no key gets out = 0 and lse = -inf.
//
// Softcap c > 0 replaces each scaled score s by c * tanh(s / c) before the softmax.
#pragma once

#include <string>
#include <vector>

#include "flashattn/types.h"

namespace flashattn {

enum class Backend : int {
  kAuto = 0,  // where the tensors live: CPU memory -> cpu, CUDA memory -> cuda
  kCPU = 1,
  kCUDA = 2,
};

// The algorithm inside a backend. `auto` picks the fastest built one for the shape.
enum class Algorithm : int {
  kAuto = 0,
  kStandard = 1,  // materializes S and P in memory (cuda): the baseline before FlashAttention
  kFA1 = 2,       // FlashAttention-1 loop order: KV outer, Q inner (cuda)
  kFA2 = 3,       // query-parallel, sliced-Q warps, deferred normalization (cpu: tiled; cuda: sm80+)
  kFA3 = 4,       // Hopper: TMA + WGMMA + warp specialization (cuda sm90a)
};

const char* to_string(Backend backend);
const char* to_string(Algorithm algorithm);
// Parse "auto", "cpu", "cuda" / "auto", "standard", "fa1", "fa2", "fa3". Returns false on unknown names.
bool parse_backend(const std::string& name, Backend* backend);
bool parse_algorithm(const std::string& name, Algorithm* algorithm);

// Everything a forward call reads and writes. Absent optional tensors have data == nullptr.
struct AttentionArgs {
  TensorView q, k, v;
  TensorView out;
  TensorView lse;  // optional output in forward; required input in backward

  // Varlen: int32 [batch + 1] prefix sums of the sequence lengths, in the same memory as q.
  // Both or neither. With them, q/k/v/out are packed 3-D tensors. Packed rows after the last sequence
  // (cu_seqlens_q[batch] < rows of q) belong to no sequence: the forward writes out = 0 and lse = -inf there,
  // the backward zero gradients (dq there, and dk and dv on the rows after cu_seqlens_k[batch]).
  TensorView cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0;  // varlen only: an upper bound of the sequence lengths (0 = compute it)
  int64_t max_seqlen_k = 0;

  float softmax_scale = 0.0f;  // 0 means 1 / sqrt(head_dim)
  bool causal = false;
  int64_t window_left = -1;  // -1 = unbounded
  int64_t window_right = -1;
  float softcap = 0.0f;  // 0 = off

  Backend backend = Backend::kAuto;
  Algorithm algorithm = Algorithm::kAuto;
  bool deterministic = false;  // backward: bitwise-reproducible gradients
  int num_threads = 0;         // cpu: worker threads, 0 = all hardware threads
  void* stream = nullptr;      // cuda: the cudaStream_t to run on (nullptr = default stream)
};

// Backward: the forward call's arguments (out and lse now inputs) plus dout and the gradient outputs,
// which have the shapes of q, k and v. CUDA fa2 takes a temporary workspace from the stream: LSE and D for
// every (sequence, head) up to the longest sequence rounded up to 128 rows, and unless deterministic an
// fp32 dQ accumulator of heads_q * head_dim floats per row, each sequence's rows rounded up to 16 plus 16
// (about twice dq's bytes for long sequences; up to 32 rows for a one-token varlen sequence).
struct BackwardArgs {
  AttentionArgs fwd;
  TensorView dout;
  TensorView dq, dk, dv;
};

// What ran: filled by forward/backward when a pointer is given.
struct RunInfo {
  Backend backend = Backend::kAuto;
  Algorithm algorithm = Algorithm::kAuto;
  std::string kernel;  // e.g. "cpu_fa2_fwd", "fa2_fwd_sm80_bf16_hd128"
};

Status forward(const AttentionArgs& args, RunInfo* info = nullptr);
Status backward(const BackwardArgs& args, RunInfo* info = nullptr);

// The fa3 kernel with one of its overlaps compiled out, to measure what each buys (the FA3 paper's
// ablation). CUDA only, needs fa3 support for the problem; otherwise exactly as forward().
//   kNoWarpSpecialization:     no producer warpgroup: the consumers issue their own loads
//   kNoPingPong:               the consumer warpgroups do not take turns between softmax and GEMMs
//   kNoIntraWarpgroupOverlap:  a block's softmax waits for the previous block's P V
// algorithm must be auto or fa3. RunInfo names the variant after the kernel ("..._no_ping_pong").
enum class Fa3Ablation { kFull, kNoWarpSpecialization, kNoPingPong, kNoIntraWarpgroupOverlap };
Status forward_fa3_ablation(const AttentionArgs& args, Fa3Ablation variant, RunInfo* info = nullptr);
// "full", "no_warp_specialization", "no_ping_pong", "no_intra_warpgroup_overlap".
const char* to_string(Fa3Ablation variant);

// Validate and dispatch without running: ok when forward/backward would run, else the reason.
Status check_supported(const AttentionArgs& args, RunInfo* info = nullptr);
Status check_supported(const BackwardArgs& args, RunInfo* info = nullptr);

// Static facts about one backend and algorithm, for help texts and the CLI.
struct Capabilities {
  Backend backend = Backend::kAuto;
  Algorithm algorithm = Algorithm::kAuto;
  bool available = false;  // built, and (cuda) a device is present
  std::string note;        // why not available, or which device
  std::vector<DType> dtypes;
  std::vector<int> head_dims;  // exact head dims; empty with max_head_dim > 0 means "any up to max"
  int max_head_dim = 0;
  bool backward = false, causal = false, window = false, softcap = false, gqa = false, varlen = false;
};

std::vector<Capabilities> capabilities();
bool cuda_built();       // the library was compiled with CUDA kernels
int cuda_device_count();  // 0 without CUDA or without a device

// Version string "MAJOR.MINOR.PATCH".
const char* version();

}  // namespace flashattn
