// The wide decode kernel for head dims 72..128: 8 warps with 3-deep rings (2 blocks of 2 x 4 KB in flight
// per warp, 128 KB per CTA), one CTA per SM (209 KB of shared memory). decode_fwd.cu takes it when the
// call's tiles fit one wave of it: half the splits of the 4-warp kernel for the same loads in flight per SM,
// so fewer partial rows and a shorter merge (docs/kvcache.md has the measurements). On sm90 it also has the
// form that merges a tile's splits inside a thread block cluster, taken where the clusters fit at once.
#include "cuda/decode/decode_launch.cuh"

namespace flashattn::cuda::decode {

DecodeKernel decode_kernel_hd128_wide() { return make_kernel<DecodeConfig<128, 3, 8, 1>, true>(); }

}  // namespace flashattn::cuda::decode
