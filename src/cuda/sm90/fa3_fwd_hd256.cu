// fa3 forward kernels for head dim 256 (fp16 and bf16).
#include "cuda/sm90/fa3_launch.cuh"

namespace flashattn::cuda::fa3 {

Status launch_hd256(const detail::Problem& prob, const Context& ctx) {
  if (prob.dtype == DType::kFloat16) return launch_full<256, __half>(prob, ctx);
  return launch_full<256, __nv_bfloat16>(prob, ctx);
}

}  // namespace flashattn::cuda::fa3
