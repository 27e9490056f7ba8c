// The CUDA algorithms the dispatcher can call. Each one checks what it supports (`*_supports`, which
// also names the kernel it would run) and launches on ctx.stream. Every function is implemented in the
// folder of its algorithm.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "api/kvcache_problem.h"
#include "api/problem.h"

namespace flashattn::cuda {

struct Context {
  cudaStream_t stream = nullptr;
  int device = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t smem_optin = 0;  // max dynamic shared memory per block after opt-in
};

// `standard`: S = QK^T and dP through cuBLAS into device memory, softmax kernels in between (standard/).
Status standard_supports(const detail::Problem& p, const Context& ctx, std::string* kernel);
Status standard_forward(const detail::Problem& p, const Context& ctx);
Status standard_backward(const detail::Problem& p, const Context& ctx);

// The fa1 and fa2 backwards and the fa2 and fa3 forwards write the rows of sequences only; the caller writes the
// packed rows after the last one (cuda/common/unowned_rows.h).

// `fa1`: FlashAttention-1 loop order, KV tiles outer, Q tiles inner, O and row stats in HBM (sm80/).
Status fa1_supports(const detail::Problem& p, const Context& ctx, std::string* kernel);
Status fa1_forward(const detail::Problem& p, const Context& ctx);
Status fa1_backward(const detail::Problem& p, const Context& ctx);

// `fa2`: query-parallel, sliced-Q warps, cp.async + ldmatrix + mma.sync (sm80/).
Status fa2_supports(const detail::Problem& p, const Context& ctx, std::string* kernel);
Status fa2_forward(const detail::Problem& p, const Context& ctx);
Status fa2_backward_supports(const detail::Problem& p, const Context& ctx, std::string* kernel);
Status fa2_backward(const detail::Problem& p, const Context& ctx);

// `fa3`: Hopper forward (sm90a): TMA loads, wgmma, a producer warpgroup and two consumer warpgroups in
// ping-pong, softmax overlapped with the previous block's P V, a persistent tile scheduler (sm90/).
// The ablation entry runs the same kernel with one of its overlaps compiled out.
enum class Fa3Variant { kFull, kNoWarpSpecialization, kNoPingPong, kNoIntraWarpgroupOverlap };
// Whether this build holds sm_90a code (FLASHATTN_CUDA_ARCHITECTURES includes 90a) and the device is
// compute capability 9.0: where fa3 can run at all. Empty `why` when it can.
bool fa3_runs_on(int cc_major, int cc_minor, std::string* why);
Status fa3_supports(const detail::Problem& p, const Context& ctx, std::string* kernel);
// The same, naming the kernel `variant` runs: the ablation variants never pack GQA tiles.
Status fa3_supports(const detail::Problem& p, const Context& ctx, std::string* kernel, Fa3Variant variant);
Status fa3_forward(const detail::Problem& p, const Context& ctx, Fa3Variant variant = Fa3Variant::kFull);

// KV-cache attention (decode): split-KV with packed GQA and an in-kernel LSE merge, after an append kernel
// for k_new / v_new (decode/).
Status decode_supports(const detail::KVCacheProblem& p, const Context& ctx, std::string* kernel);
// `kernel` (optional): the name of the kernel the call was planned on, set before anything is launched.
Status decode_forward(const detail::KVCacheProblem& p, const Context& ctx, std::string* kernel = nullptr);
// Whether an `auto` forward call runs on the split-KV decode kernel (no varlen, forward only, at most
// decode::kForwardMaxRows query rows per KV head, or kForwardMaxRowsFewPairs with few (batch, KV head)
// pairs, a kernel that takes it); if so, `kv` is the call as a
// KV-cache call on full caches (no lengths, no append) and `kernel` the kernel's name.
bool decode_takes_forward(const detail::Problem& p, const Context& ctx, detail::KVCacheProblem* kv,
                          std::string* kernel);

}  // namespace flashattn::cuda
