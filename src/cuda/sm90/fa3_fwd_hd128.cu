// fa3 forward kernels for head dim 128 (fp16 and bf16).
#include "cuda/sm90/fa3_launch.cuh"

namespace flashattn::cuda::fa3 {

Status launch_hd128(const detail::Problem& prob, const Context& ctx, Fa3Variant variant) {
  if (prob.dtype == DType::kFloat16) return launch_variant<128, __half>(prob, ctx, variant);
  return launch_variant<128, __nv_bfloat16>(prob, ctx, variant);
}

}  // namespace flashattn::cuda::fa3
