// Decode kernels for head dims 136..256: 4 warps with 3-deep rings (2 blocks of 2 x 8 KB in flight per
// warp, 128 KB per CTA), one CTA per SM (206 KB of shared memory).
#include "cuda/decode/decode_launch.cuh"

namespace flashattn::cuda::decode {

DecodeKernel decode_kernel_hd256() { return make_kernel<DecodeConfig<256, 3, 4, 1>>(); }

}  // namespace flashattn::cuda::decode
