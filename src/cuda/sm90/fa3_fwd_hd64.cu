// fa3 forward kernels for head dim 64 (fp16 and bf16; 192-row tiles, and 128-row tiles for short causal
// problems, fa3_consumers).
#include "cuda/sm90/fa3_launch.cuh"

namespace flashattn::cuda::fa3 {

Status launch_hd64(const detail::Problem& prob, const Context& ctx) {
  if (fa3_consumers(prob) == 2) {  // short causal problems: 128-row tiles
    if (prob.dtype == DType::kFloat16) return launch_full<64, __half, 2>(prob, ctx);
    return launch_full<64, __nv_bfloat16, 2>(prob, ctx);
  }
  if (prob.dtype == DType::kFloat16) return launch_full<64, __half>(prob, ctx);
  return launch_full<64, __nv_bfloat16>(prob, ctx);
}

}  // namespace flashattn::cuda::fa3
