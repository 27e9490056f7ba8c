// fa1 forward launches: workspace, the KV-outer kernel, and the final normalization pass.
#include "cuda/common/problem_params.cuh"
#include "cuda/sm80/fa1_fwd_kernel.cuh"
#include "cuda/sm80/fa1_launch.cuh"

namespace flashattn::cuda::fa1 {

size_t forward_smem(int head_dim_instance, size_t elem) {
  return head_dim_instance <= 64 ? forward_smem_bytes<Config<64>>(elem) : forward_smem_bytes<Config<128>>(elem);
}

template <typename T, int kD>
Status run_forward(const detail::Problem& p, const Context& ctx) {
  using Cfg = Config<kD>;
  const AttnParams params = make_params(p);
  const int64_t rows = workspace_rows(p);
  const size_t head_rows = size_t(p.heads_q * rows);
  // O [heads][rows][kD], then m and l [heads][rows]; all zero: l = 0 marks "no visible key yet".
  StreamBuffer buf(ctx.stream);
  Status s = buf.allocate_zeroed(head_rows * (kD + 2) * sizeof(float));
  if (!s.ok()) return s;
  const ForwardWorkspace ws{buf.floats(0), buf.floats(head_rows * kD), buf.floats(head_rows * (kD + 1)), rows};
  if (p.batch > 0) {
    const size_t smem = forward_smem_bytes<Cfg>(sizeof(T));
    s = allow_smem(fa1_forward_kernel<T, Cfg>, smem);
    if (!s.ok()) return s;
    const dim3 grid(unsigned(p.heads_q), unsigned(p.batch));
    fa1_forward_kernel<T, Cfg><<<grid, Cfg::kThreads, smem, ctx.stream>>>(params, ws, vector_loads_ok(p));
    FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa1_forward_kernel");
  }
  if (head_rows > 0) {
    const unsigned blocks = unsigned((head_rows + kFinalizeWarps - 1) / kFinalizeWarps);
    fa1_forward_finalize_kernel<T><<<blocks, kFinalizeWarps * kWarpSize, 0, ctx.stream>>>(params, ws, kD);
    FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa1_forward_finalize_kernel");
  }
  return Status::Ok();
}

template Status run_forward<__half, 64>(const detail::Problem&, const Context&);
template Status run_forward<__half, 128>(const detail::Problem&, const Context&);
template Status run_forward<__nv_bfloat16, 64>(const detail::Problem&, const Context&);
template Status run_forward<__nv_bfloat16, 128>(const detail::Problem&, const Context&);

}  // namespace flashattn::cuda::fa1
