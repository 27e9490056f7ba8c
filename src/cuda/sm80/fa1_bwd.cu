// fa1 backward launches: D = rowsum(dO * O), the KV-outer kernel with dQ in an fp32 HBM workspace, and
// the pass that writes dq in the input dtype.
#include "cuda/common/problem_params.cuh"
#include "cuda/sm80/fa1_bwd_kernel.cuh"
#include "cuda/sm80/fa1_launch.cuh"

namespace flashattn::cuda::fa1 {

size_t backward_smem(int head_dim_instance, size_t elem) {
  return head_dim_instance <= 64 ? backward_smem_bytes<Config<64>>(elem) : backward_smem_bytes<Config<128>>(elem);
}

template <typename T, int kD>
Status run_backward(const detail::Problem& p, const Context& ctx) {
  using Cfg = Config<kD>;
  const AttnParams params = make_params(p);
  const int64_t rows = workspace_rows(p);
  const size_t head_rows = size_t(p.heads_q * rows);
  // dQ accumulator [heads][rows][kD] (must start at zero), then D [heads][rows].
  StreamBuffer buf(ctx.stream);
  Status s = buf.allocate_zeroed(head_rows * (kD + 1) * sizeof(float));
  if (!s.ok()) return s;
  const BackwardWorkspace ws{buf.floats(0), buf.floats(head_rows * kD), rows};
  const unsigned row_blocks = unsigned((head_rows + kRowWarps - 1) / kRowWarps);
  if (head_rows > 0) {
    fa1_row_dot_kernel<T><<<row_blocks, kRowWarps * kWarpSize, 0, ctx.stream>>>(params, ws);
    FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa1_row_dot_kernel");
  }
  if (p.batch > 0) {
    const size_t smem = backward_smem_bytes<Cfg>(sizeof(T));
    s = allow_smem(fa1_backward_kernel<T, Cfg>, smem);
    if (!s.ok()) return s;
    // One block per (KV head, batch): it owns dK and dV of its KV head, and dQ of the group's query heads.
    const dim3 grid(unsigned(p.heads_kv), unsigned(p.batch));
    fa1_backward_kernel<T, Cfg><<<grid, Cfg::kThreads, smem, ctx.stream>>>(params, ws, vector_loads_ok(p));
    FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa1_backward_kernel");
  }
  if (head_rows > 0) {
    fa1_dq_finalize_kernel<T><<<row_blocks, kRowWarps * kWarpSize, 0, ctx.stream>>>(params, ws, kD);
    FA_CUDA_RETURN_IF_LAUNCH_ERROR("fa1_dq_finalize_kernel");
  }
  return Status::Ok();
}

template Status run_backward<__half, 64>(const detail::Problem&, const Context&);
template Status run_backward<__half, 128>(const detail::Problem&, const Context&);
template Status run_backward<__nv_bfloat16, 64>(const detail::Problem&, const Context&);
template Status run_backward<__nv_bfloat16, 128>(const detail::Problem&, const Context&);

}  // namespace flashattn::cuda::fa1
