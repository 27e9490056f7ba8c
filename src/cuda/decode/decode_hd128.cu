// Decode kernels for head dims 72..128: 4 warps with 3-deep rings (2 blocks of 2 x 4 KB in flight per warp,
// 64 KB per CTA), two CTAs per SM (2 x 106 KB of shared memory).
#include "cuda/decode/decode_launch.cuh"

namespace flashattn::cuda::decode {

DecodeKernel decode_kernel_hd128() { return make_kernel<DecodeConfig<128, 3, 4, 2>>(); }

}  // namespace flashattn::cuda::decode
