// Decode kernels for head dims up to 64: 4 warps with 6-deep rings (5 blocks of 2 x 2 KB in flight per
// warp, 80 KB per CTA), two CTAs per SM (2 x 110 KB of shared memory).
#include "cuda/decode/decode_launch.cuh"

namespace flashattn::cuda::decode {

DecodeKernel decode_kernel_hd64() { return make_kernel<DecodeConfig<64, 6, 4, 2>>(); }

}  // namespace flashattn::cuda::decode
